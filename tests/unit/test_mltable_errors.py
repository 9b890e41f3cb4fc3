"""Tables Azure's mltable refuses are refused here in its words, on one line, with the file and
line where it names none (mlops/runtime/mltable.py, mltable_worker.py)."""

from __future__ import annotations

import pytest

from mlops.errors import LocalRunError
from mlops.runtime import mltable_worker
from mlops.runtime.mltable import remote_paths

ROWS = "paths:\n  - file: ./x.csv\ntransformations:\n  - read_delimited:\n      delimiter: ','\n"
# mltable 1.7's own error text, as it raises it (a native trace, a session id)
ENCODING = ("\nError Code: ScriptExecution.Validation\nValidation Target: Encoding\nNative error: "
            "Dataflow visit error: ExecutionError(EncodingError { encoding: \"utf-8\" })\n\t"
            "VisitError(...)\nError Message: Error attempting to decode into utf-8.| "
            "session_id=l_1234")
NOT_FOUND = ("\nError Code: ScriptExecution.StreamAccess.NotFound\nNative Error: Dataflow visit "
             "error: ExecutionError(StreamError(NotFound))\nError Message: The requested stream "
             "was not found. Please make sure the request uri is correct.| session_id=l_1")
TAG = ("\nError Code: UserError\nError Message: MLTable yaml is invalid: could not determine a "
       "constructor for the tag 'tag:yaml.org,2002:python/object/apply:os.system'\n  in "
       "\"/t/MLTable\", line 2, column 11| session_id=l_2")


def test_an_encoding_error_names_the_file_and_line_mltable_does_not(tmp_path, monkeypatch):
    (tmp_path / "MLTable").write_text(ROWS)
    (tmp_path / "x.csv").write_bytes(b"a,b\n1,2\n2,caf\xe9\n")
    monkeypatch.setattr(mltable_worker, "table_files",
                        lambda folder: ([str(tmp_path / "x.csv")], "utf-8"))
    said = mltable_worker.describe(Exception(ENCODING), str(tmp_path))
    assert said == ("ScriptExecution.Validation: Error attempting to decode into utf-8. (first in "
                    f"{tmp_path}/x.csv:3, byte 0xe9 at column 6, not utf-8)")


def test_a_path_that_names_no_file_says_mltables_code_and_the_paths(tmp_path):
    (tmp_path / "MLTable").write_text("paths:\n  - pattern: ./*.csv\n")
    said = mltable_worker.describe(Exception(NOT_FOUND), str(tmp_path))
    assert said == ("ScriptExecution.StreamAccess.NotFound: The requested stream was not found. "
                    "Please make sure the request uri is correct. (its paths: pattern: ./*.csv)")


def test_mltables_refusal_of_a_tag_is_one_line_with_its_place(tmp_path):
    said = mltable_worker.describe(Exception(TAG), str(tmp_path))
    assert "\n" not in said and said.startswith("UserError: MLTable yaml is invalid") and \
        said.endswith('in "/t/MLTable", line 2, column 11')


@pytest.mark.parametrize("text", ["paths: !!python/object/apply:os.system ['echo hi']\n",
                                  "paths:\n  - file: !!python/name:os.system\n", "paths: [\n"])
def test_an_mltable_file_with_a_python_tag_is_refused_before_mltable_starts(tmp_path, text):
    (tmp_path / "MLTable").write_text(text)
    with pytest.raises(LocalRunError, match=r"MLTable: not a readable MLTable file .* Azure's "
                                            r"mltable refuses it too"):
        remote_paths(tmp_path / "MLTable")
