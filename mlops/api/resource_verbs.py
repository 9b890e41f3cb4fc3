"""The workspace's named resources as Session's verbs: the local workspace itself, its
computes, datastores and schedules (`az ml workspace|compute|datastore|schedule ...`). Session
takes them in; a schedule's job is checked and run with the session's maps."""

from __future__ import annotations

from pathlib import Path

from mlops.api import computes, datastores, generic_update, schedules


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

    def power_compute(self, name: str, action: str) -> None:
        """`az ml compute start|stop|restart` (action)."""
        computes.power(name, action)

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


    # schedules --------------------------------------------------------------------------
    def create_schedule(self, spec: Path, *, name: str | None = None,
                        sets: tuple[str, ...] = ()) -> schedules.View:
        return schedules.create(schedules.ScheduleRequest(
            spec=spec, name=name, sets=sets, asset_file=self.asset_file,
            env_file=self.env_file))

    def show_schedule(self, name: str) -> schedules.View:
        return schedules.show(name)

    def list_schedules(self, enabled: bool | None = True) -> list[schedules.View]:
        return schedules.every(enabled)

    def update_schedule(self, name: str, edits: list[generic_update.Edit], *,
                        force_string: bool = False) -> schedules.View:
        return schedules.update(name, edits, force_string=force_string)

    def enable_schedule(self, name: str, *, enabled: bool = True) -> schedules.View:
        return schedules.enable(name, enabled)

    def delete_schedule(self, name: str) -> None:
        schedules.delete(name)

    def trigger_schedule(self, name: str) -> schedules.View:
        return schedules.trigger(schedules.Trigger(
            name=name, asset_file=self.asset_file, env_file=self.env_file,
            max_procs=self.max_procs))
