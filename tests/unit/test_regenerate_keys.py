"""`online-endpoint regenerate-keys`: a new key of the type asked for, the other kept;
azure-ai-ml's refusals in its words (begin_regenerate_keys, _regenerate_online_keys)."""

from __future__ import annotations

import os

import pytest

from mlops.endpoints import endpoint_actions, local_endpoint
from mlops.endpoints.endpoint_state import AuthMode, EndpointState
from mlops.errors import LocalRunError


@pytest.fixture
def endpoint(tmp_path, monkeypatch):
    """A key endpoint whose front is this process (so it counts as running)."""
    monkeypatch.setattr(local_endpoint, "ENDPOINTS", tmp_path)
    folder = tmp_path / "ep-keys"
    folder.mkdir()
    state = EndpointState(name="ep-keys", port=5001, front_pid=os.getpid())
    state.ensure_credentials()
    state.write(folder)
    return folder, dict(state.keys)


@pytest.mark.parametrize("key_type", ["primary", "Secondary"])
def test_the_key_asked_for_is_new_and_the_other_still_opens(endpoint, key_type):
    folder, before = endpoint
    endpoint_actions.regenerate_key("ep-keys", key_type)
    state = EndpointState.read(folder)
    after = state.keys
    changed = f"{key_type.lower()}Key"
    kept = ({"primaryKey", "secondaryKey"} - {changed}).pop()
    assert after[changed] != before[changed] and after[kept] == before[kept]
    assert state.accepts(after[kept]) and not state.accepts(before[changed])


def test_a_wrong_type_or_a_token_endpoint_is_refused_in_azure_ai_mls_words(endpoint):
    folder, _ = endpoint
    with pytest.raises(LocalRunError, match="Key type must be 'primary' or 'secondary'."):
        endpoint_actions.regenerate_key("ep-keys", "tertiary")
    state = EndpointState.read(folder)
    state.auth_mode = AuthMode.AML_TOKEN
    state.write(folder)
    with pytest.raises(LocalRunError, match="does not use keys for authentication"):
        endpoint_actions.regenerate_key("ep-keys", "primary")
