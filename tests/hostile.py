"""What hostile clients send, for property tests: any JSON value, and the checks every
admission answer must pass whatever it was sent."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import jsonpatch
from hypothesis import strategies as st
from werkzeug.test import TestResponse

from webhook.review import MAX_MESSAGE

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)


def assert_clear_admission_answer(review: dict[str, Any], reply: TestResponse) -> None:
    """200 with an answer to this review (a patch that applies to its object, a denial that
    says why, in at most about 2 KB) or 400 for a review that is not one; never a 500."""
    assert reply.status_code in (200, 400), reply.get_data(as_text=True)
    if reply.status_code == 400:
        return
    response = reply.get_json()["response"]
    assert response["uid"] == review["request"]["uid"]
    if "patch" in response:
        assert response["allowed"] and response["patchType"] == "JSONPatch"
        ops = json.loads(base64.b64decode(response["patch"]))
        jsonpatch.apply_patch(copy.deepcopy(review["request"]["object"]), ops)
    if not response["allowed"]:
        message = response["status"]["message"]
        assert message.strip() and len(message) <= MAX_MESSAGE + 64, len(message)
