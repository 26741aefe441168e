"""Ref classification, validation and latest_release ordering (no builds)."""
import pytest

from refbench import refs
from refbench.errors import RefError


@pytest.mark.parametrize("text,kind", [
    ("v2.2.2", "tag"), ("2.2.2", "tag"), ("v1.2.0-rc1", "tag"), ("478", "pr"), ("#478", "pr"),
    ("a1b2c3d", "commit"), ("991c9fbc16709341b4bac04513232a1445941f63", "commit"),
    ("master", "branch"), ("main", "branch"), ("feature/x-y", "branch"),
    # all-letter hex words are tried as a branch first (resolve falls back to a commit)
    ("deadbeef", "branch"),
    ("latest_release", "latest_release"), ("HEAD", "head"), ("facade", "branch"),
])
def test_classify(text, kind):
    assert refs.classify(text).kind == kind


def test_pr_number_parsed():
    assert refs.classify("#12").pr == 12 and refs.classify("7").pr == 7


@pytest.mark.parametrize("bad", [
    "", "-s", "--upload-pack=evil", "a..b", "x;rm -rf /", "$(id)", "a b", "HEAD@{1}", "foo.lock",
    "trailing/", "..", "x/.hidden", "back`tick`", "new\nline", "a" * 300, "@{u}", "*",
])
def test_invalid_refs_refused(bad):
    with pytest.raises(RefError, match="not a valid ref"):
        refs.validate(bad)


def test_latest_release_is_highest_stable_semver_not_newest():
    # creation order: v1.1.0 released, then a back-ported v1.0.9 patch, then an rc
    tags = ["v1.0.0", "v1.1.0", "v1.0.9", "v1.2.0-rc1", "v1.10.0-beta", "nightly", "v0.9.0"]
    assert refs.latest_release(tags) == "v1.1.0"
    assert refs.latest_release(tags + ["v1.10.0"]) == "v1.10.0"  # numeric, not lexical
    assert refs.latest_release(["v2.0.0-rc.1"]) is None


def test_semver_prerelease_ordering():
    ordered = ["v1.0.0-alpha", "v1.0.0-alpha.1", "v1.0.0-alpha.beta", "v1.0.0-beta", "v1.0.0-beta.2",
               "v1.0.0-beta.11", "v1.0.0-rc.1", "v1.0.0"]
    assert sorted(reversed(ordered), key=refs.semver_key) == ordered
