"""What a run stores on a bucket, as cleanup sees it: the buckets the embedded server is given, and
deleting exactly what lies under a prefix (every version of it in a versioned bucket), in batches,
until the server shows nothing more. S3Backend's teardown, its end of a scenario and its sweep of
dead runs' prefixes go through `Objects`, which refuses any prefix that is not the run's own or a
dead run's directly below -p: a cleanup that deletes the wrong thing is the one error it must not make.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import RunError
from ..lease import lease_key


def create_buckets(client, bucket: str, versioned: str) -> str:
    """The embedded server's two buckets: the run's, and a versioned one for areas whose deletions
    are undone before every run (s3restore). The versioned one's name."""
    client.create_bucket(Bucket=bucket)
    client.create_bucket(Bucket=versioned)
    client.put_bucket_versioning(Bucket=versioned, VersioningConfiguration={"Status": "Enabled"})
    return versioned


def versioning(client: Callable[[], Any], bucket: str) -> str | None:
    """A bucket's versioning ("Enabled", "Suspended"), None where it has none or will not say (a
    user's bucket is used as it is, never reconfigured: what it says decides how it is cleaned)."""
    try:
        return client().get_bucket_versioning(Bucket=bucket).get("Status")
    except Exception:
        return None


@dataclass(frozen=True)
class Objects:
    """A run's objects on one bucket: its prefix, the -p its prefix is below (a user's bucket, where
    dead runs' prefixes are swept), the versioned bucket, and the key of its lease, which goes last.
    `client` makes a client per pass, as each listing asks the server anew."""
    client: Callable[[], Any]
    bucket: str
    prefix: str  # the run's, no leading or trailing slash
    base_prefix: str = ""
    versioned_bucket: str | None = None
    lease_key: str | None = None

    def remove_prefix(self, settle: float = 10.0) -> int:
        """Delete every object under this run's prefix — every version of it in a versioned
        bucket — and nothing else; the lease goes last, so a cleanup cut short still leaves a
        lease that will expire and let the next run finish the job. Uploads cut off by Ctrl-C or
        a failure may still be committed by the server just after the client died, so repeat
        until a listing comes back empty."""
        if not self.prefix.strip("/"):
            raise RunError("refusing to clean an empty prefix")
        prefix = self.prefix.rstrip("/") + "/"
        keep, versions = self.lease_key, self.versioned_bucket == self.bucket
        removed = self.purge(prefix, versions=versions, keep=keep, settle=settle)
        if keep:
            removed += self.purge(prefix, versions=versions, settle=settle)
        return removed

    def remove_dead(self, prefix: str) -> int:
        """Remove a dead run's prefix (found by the lease sweep): below -p, never this run's own."""
        base = self.base_prefix.strip("/") + "/"
        prefix = prefix.strip("/")
        if not base.strip("/") or not prefix.startswith(base) or prefix == self.prefix.strip("/") \
                or "/" in prefix[len(base):]:
            raise RunError(f"refusing to remove {prefix!r}: not a run's prefix directly below {base!r}")
        versions = self.bucket_has_versions()
        removed = self.purge(prefix + "/", versions=versions, keep=lease_key(prefix))  # its lease last
        return removed + self.purge(prefix + "/", versions=versions)

    def bucket_has_versions(self) -> bool:
        # suspended versioning keeps the versions made while it was enabled
        return self.versioned_bucket == self.bucket or versioning(self.client, self.bucket) in ("Enabled", "Suspended")

    def purge(self, prefix: str, versions: bool, keep: str | None = None, settle: float = 10.0) -> int:
        """Delete everything under prefix (but keep), repeating until two listings a pause apart
        find nothing."""
        removed, empty_passes, deadline = 0, 0, time.monotonic() + settle
        while empty_passes < 2:  # two passes in a row, a pause apart, found nothing
            n = self.delete_under(self.bucket, prefix, versions, keep)
            removed += n
            empty_passes = empty_passes + 1 if n == 0 else 0
            if time.monotonic() > deadline:
                raise RunError(f"objects keep appearing under s3://{self.bucket}/{prefix} during cleanup")
            if empty_passes < 2:
                time.sleep(0.2)
        return removed

    def delete_versions(self, bucket: str, prefix: str) -> int:
        """Delete every version and delete marker under prefix (which is inside this run's prefix)."""
        if not prefix.startswith(self.prefix.rstrip("/") + "/"):
            raise RunError(f"refusing to delete outside this run's prefix: {prefix!r}")
        return self.delete_under(bucket, prefix, True, self.lease_key if bucket == self.bucket else None)

    def delete_under(self, bucket: str, prefix: str, versions: bool, keep: str | None = None) -> int:
        if not prefix.strip("/") or not prefix.endswith("/"):
            raise RunError(f"refusing to delete under {prefix!r}")
        client = self.client()
        entries = []
        if versions:
            for page in client.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
                for v in page.get("Versions", []) + page.get("DeleteMarkers", []):
                    if v["Key"].startswith(prefix) and v["Key"] != keep:
                        entries.append({"Key": v["Key"], "VersionId": v["VersionId"]})
        else:
            for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
                entries += [{"Key": o["Key"]} for o in page.get("Contents", [])
                            if o["Key"].startswith(prefix) and o["Key"] != keep]
        return delete_batches(client, bucket, entries)


def delete_batches(client, bucket: str, entries: list[dict]) -> int:
    """DeleteObjects, 1000 keys (or key versions) per request."""
    for i in range(0, len(entries), 1000):
        client.delete_objects(Bucket=bucket, Delete={"Objects": entries[i:i + 1000], "Quiet": True})
    return len(entries)
