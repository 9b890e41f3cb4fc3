"""The names of a job's inputs, outputs and swept parameters as `az ml job create` takes them.

azure-ai-ml's `_validate()` passes any name; its conversion to the REST body, which az ml job
create runs before sending the job, refuses an input or output name that is not letters, digits
and underscores (`validate_key_contains_allowed_characters`; a pipeline's own inputs may be
dotted, for parameter groups; a node's names are its component's, which azure-ai-ml's
validation checks). The same functions decide here, so an output named `..`, `a/b` or `é` is
refused before a folder is made with that name.
"""

from __future__ import annotations

from mlops.specs import Finding, Spec

FIX = "rename it: letters, digits and underscores, not starting with a digit"
JOBS = ("commandJob", "sweepJob", "sparkJob", "pipelineJob", "autoMLJob")


def refused(spec: Spec) -> list[Finding]:
    """A finding for each input or output name az ml job create refuses, at its line."""
    if spec.kind not in JOBS:
        return []
    from azure.ai.ml.entities._job._input_output_helpers import (  # loaded when a job is checked
        validate_key_contains_allowed_characters,
        validate_pipeline_input_key_characters,
    )

    pipeline = spec.kind == "pipelineJob"
    found = _names(spec, ("inputs",), validate_pipeline_input_key_characters if pipeline
                   else validate_key_contains_allowed_characters)
    found += _names(spec, ("outputs",), validate_key_contains_allowed_characters)
    if spec.kind == "sweepJob":  # its search space's names too (SweepJob._to_rest_object)
        found += _names(spec, ("search_space",), validate_key_contains_allowed_characters)
    return found


def _names(spec: Spec, where: tuple[str, ...], rule) -> list[Finding]:
    section = spec.data
    for key in where:
        section = section.get(key) if isinstance(section, dict) else None
    from azure.ai.ml.exceptions import ValidationException

    found = []
    for name in section if isinstance(section, dict) else {}:
        try:
            rule(str(name))
        except ValidationException as err:
            found.append(Finding(path=spec.path, key=".".join((*where, str(name))),
                                 problem=f"azure-ai-ml: {err.message.replace('  ', ' ')} (az ml "
                                 "job create refuses it)", fix=FIX,
                                 line=spec.line((*where, str(name)))))
    return found
