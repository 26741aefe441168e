"""trust.gate: the one check what is restored from a cache passes before a run uses it (a build's
binary, a copy of a same-tree build, kubo's GC state): the seal under this machine's key first,
then the content's hash against the sealed one, and the content is never hashed when the seal fails."""
from __future__ import annotations

import pytest

from refbench import trust
from refbench.errors import RefbenchError

PURPOSE = "a test record v1"


@pytest.fixture(autouse=True)
def key():
    with trust.key_in_use(b"the-gate-tests-key-0123456789abcdef"):
        yield


def record(fields):
    return {**fields, "seal": trust.seal(PURPOSE, fields), "key_id": trust.key_id()}


def test_a_sealed_record_whose_content_still_hashes_to_it_passes():
    fields = {"what": "x", "digest": "ab" * 32}
    assert trust.gate(PURPOSE, fields, record(fields), "digest", lambda: "ab" * 32) is None


def test_changed_content_is_refused_naming_both_hashes():
    fields = {"what": "x", "digest": "ab" * 32}
    why = trust.gate(PURPOSE, fields, record(fields), "digest", lambda: "cd" * 32)
    assert why == f"its content hashes to {'cd' * 6}, not the sealed {'ab' * 6}"


def test_no_seal_another_key_or_another_purpose_is_refused_without_hashing():
    fields = {"what": "x", "digest": "ab" * 32}
    sealed = record(fields)

    def content():
        raise AssertionError("hashed although the seal does not hold")

    assert trust.gate(PURPOSE, fields, {}, "digest", content) == "not sealed under this machine's cache key"
    assert trust.gate("another purpose", fields, sealed, "digest", content).startswith("sealed under another key")
    assert trust.gate(PURPOSE, {**fields, "what": "y"}, sealed, "digest", content).startswith("sealed under another key")
    with trust.key_in_use(b"a-pull-requests-own-key-0123456789"):
        assert trust.gate(PURPOSE, fields, sealed, "digest", content) == f"sealed under another key ({sealed['key_id']})"


def test_a_key_is_given_as_a_key_file_read_once_and_checked_as_the_secrets_file(tmp_path):
    """trust.use_key / key_in_use: the seam a caller in this process has (never an environment).
    A key file is read when it is given, not at each seal, and refused as REFBENCH_CACHE_KEY_FILE's
    is when others can read it; the key in use before comes back after the block."""
    before = trust.key_id()
    path = tmp_path / "key"
    path.write_text("a-key-in-a-file-0123456789abcdef\n")
    path.chmod(0o600)
    with trust.key_in_use(path):
        from_file = trust.key_id()
        path.write_text("another-key-written-after-0123456789\n")  # read once: not seen
        assert trust.key_id() == from_file
    with trust.key_in_use(b"a-key-in-a-file-0123456789abcdef"):
        assert trust.key_id() == from_file  # the same key as bytes
    assert trust.key_id() == before != from_file
    path.chmod(0o644)
    with pytest.raises(RefbenchError, match="mode 0600"):
        trust.use_key(path)
    assert trust.key_id() == before
