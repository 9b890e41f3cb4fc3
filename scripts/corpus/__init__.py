"""The conformance corpus: published third-party Azure ML specs run through the local runtime.

scripts/conformance.py is the front door (make conformance); the rooms, in the order they are
used: manifest (conformance/corpus.yml, read and checked), sources (a repository at its pinned
commit: a git clone in the tool's cache, or a local mirror), standins (the stand-in data a case
maps its references to), runner (the one place that says how a step is run: the local runtime's
front doors today, azml's verbs later), verdict (what a run's outcome means against what Azure
would do), matrix (results.json and docs/conformance.md). Nothing here imports a front door.
"""
