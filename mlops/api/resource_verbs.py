"""The workspace's named resources as Session's verbs: the local workspace itself, its
computes and its datastores (`az ml workspace|compute|datastore ...`). Session takes them in;
they hold no settings of their own."""

from __future__ import annotations

from pathlib import Path

from mlops.api import computes, datastores


class ResourceVerbs:
    # the workspace: the local one ------------------------------------------------------
    def show_workspace(self) -> dict[str, object]:
        from mlops.api.views import workspace_view

        return workspace_view()

    # computes ---------------------------------------------------------------------------
    def create_compute(self, request: computes.ComputeRequest) -> computes.View:
        return computes.create(request)

    def show_compute(self, name: str) -> computes.View:
        return computes.show(name)

    def list_computes(self, kind: str | None = None) -> list[computes.View]:
        return computes.every(kind)

    def update_compute(self, name: str, overrides: tuple[tuple[str, object], ...]) -> \
            computes.View:
        return computes.update(name, overrides)

    def delete_compute(self, name: str) -> None:
        computes.delete(name)

    # datastores -------------------------------------------------------------------------
    def create_datastore(self, spec: Path, overrides: list[dict[str, object]]) -> \
            datastores.View:
        return datastores.create(spec, overrides)

    def show_datastore(self, name: str) -> datastores.View:
        return datastores.show(name)

    def list_datastores(self) -> list[datastores.View]:
        return datastores.every()

    def delete_datastore(self, name: str) -> None:
        datastores.delete(name)

