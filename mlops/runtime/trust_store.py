"""A job's environment trusting the local tracking server's HTTPS, as Azure's image trusts its
service's certificate (copied into every task's top layer as _mlops_trust_store.py and installed
by a .pth file, in a job the runner gave MLOPS_LOCAL_CA; standard library only, Python 3.7's
syntax).

On Azure a job calls the workspace's services on its tracking URI's host over HTTPS, and the
image's certificate store (certifi's, for requests and azure-core) holds the authority that signed
them. Here that host is the local tracking server, whose certificate a local authority signed
(local_tls.py); MLOPS_LOCAL_CA names that authority's file. certifi's bundle, when the job
imports certifi, is read as itself plus that authority: `certifi.where()` names a copy with it
added, made once per task in the top layer (`<env>/mlops-trust/`). Where the job's own variables
name the bundle requests reads (REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE), that bundle gets it the
same way. Nothing else changes: programs that read the system's store (curl, urllib) do not
trust the local server; Azure's services are reached by its SDKs, which read certifi's.
"""

from __future__ import annotations

import hashlib
import os
import sys

VARIABLE = "MLOPS_LOCAL_CA"
BUNDLE_VARIABLES = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
FOLDER = "mlops-trust"
TARGETS = ("certifi", "certifi.core")


def with_local_ca(bundle):
    """A bundle of `bundle`'s authorities and the local one (its path); `bundle` itself where
    there is none to add or it cannot be made."""
    ca = os.environ.get(VARIABLE)
    folder = os.path.join(sys.prefix, FOLDER)
    if not ca or not bundle or os.path.dirname(os.path.abspath(bundle)) == folder:
        return bundle
    try:
        with open(ca, "rb") as handle:
            local = handle.read()
        key = hashlib.sha256(os.path.abspath(bundle).encode() + b"\0" + local).hexdigest()
        made = os.path.join(folder, key[:16] + ".pem")
        if not os.path.isfile(made):
            with open(bundle, "rb") as handle:
                public = handle.read()
            if not os.path.isdir(folder):
                os.makedirs(folder, exist_ok=True)
            staged = f"{made}.{os.getpid()}.tmp"
            with open(staged, "wb") as handle:
                handle.write(public.rstrip(b"\n") + b"\n" + local)
            os.replace(staged, made)
        return made
    except OSError:
        return bundle


def patch(module):
    """certifi's where(): its bundle with the local authority added."""
    original = module.where
    if getattr(original, "_mlops_trusted", False):
        return
    found = []

    def where():
        if not found:
            found.append(with_local_ca(original()))
        return found[0]

    where._mlops_trusted = True
    module.where = where


class PatchingLoader:
    """A loader that patches the module it loads (as azureml_run.py's), and is otherwise the
    module's own: certifi reads its bundle through the loader's resource reader."""

    def __init__(self, loader):
        self.loader = loader

    def __getattr__(self, name):
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        if hasattr(module, "where"):
            patch(module)


class Finder:
    """A meta path finder (find_spec) for certifi alone."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in TARGETS:
            return None
        import importlib.machinery

        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = PatchingLoader(spec.loader)
        return spec


def install():
    """At interpreter start (the top layer's .pth): only in a job given the local authority."""
    if not os.environ.get(VARIABLE):
        return
    for name in BUNDLE_VARIABLES:
        if os.environ.get(name) and os.path.isfile(os.environ[name]):
            os.environ[name] = with_local_ca(os.environ[name])
    if not any(isinstance(f, Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, Finder())
