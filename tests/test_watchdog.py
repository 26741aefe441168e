"""The watchdog on its own (no builds): it interrupts the main thread, the running command's
process group dies with it, and the one-line reason names what crossed which floor."""
from __future__ import annotations

import time

import pytest

from refbench.errors import RefbenchError
from refbench.backends.process import run_group
from refbench.watchdog import GIB, Limits, Watchdog, WatchdogStop, meminfo, parse_env


def test_data_dir_past_its_limit_stops_the_running_command(tmp_path):
    marker = tmp_path / "still-running"
    wd = Watchdog(data_dir=tmp_path, data_label="test data dir", limits=Limits(data_max=1 << 20, interval=0.05))
    wd.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(WatchdogStop) as e:
            run_group(["sh", "-c", f"head -c 4194304 /dev/zero > {tmp_path}/big; sleep 30; touch {marker}"])
    finally:
        wd.stop()
    assert time.monotonic() - t0 < 10
    msg = str(e.value)
    assert msg.startswith("stopped by the watchdog: the test data dir grew by 4.0 MiB to 4.0 MiB, above its limit "
                          "of 1.0 MiB"), msg
    assert "\n" not in msg
    time.sleep(0.5)
    assert not marker.exists()  # the command's process group was killed, not left to finish
    rec = wd.report()
    assert rec["stopped"] and rec["data_dir"]["peak"] >= 4 << 20 and rec["samples"] >= 1


def test_memory_floor_names_what_grew(tmp_path):
    total, _ = meminfo()
    wd = Watchdog(data_dir=tmp_path, data_label="test data dir", local_dir=None,
                  limits=Limits(mem_floor=total, mem_floor_note="100% of it", interval=0.05))
    wd.note("scenario / step: round 2/5")
    try:
        with pytest.raises(WatchdogStop, match=r"available memory fell to .* below the floor of .* \(100% of it\)"
                                               r".*during scenario / step: round 2/5"):
            wd.start()  # the first sample is taken at once: it may stop the run right here
            time.sleep(10)
    finally:
        wd.stop()


def test_off_records_but_never_stops(tmp_path):
    total, _ = meminfo()
    limits = parse_env("off", Limits(mem_floor=total, interval=0.05), total)
    wd = Watchdog(data_dir=tmp_path, limits=limits).start()
    try:
        time.sleep(0.5)
    finally:
        wd.stop()
    assert wd.samples >= 3 and wd.report()["watchdog"] == "off"


def test_floors_from_the_environment():
    total = 16 * GIB
    lim = parse_env("mem=25%, disk=2G ,data=64M,interval=0.5", Limits(), total)
    assert (lim.mem_floor, lim.disk_floor_abs, lim.data_max, lim.interval) == (4 * GIB, 2 * GIB, 64 << 20, 0.5)
    assert parse_env("disk=5%", Limits(), total).disk_floor_pct == 0.05
    for bad in ("mem=lots", "nope=1", "data=-1"):
        with pytest.raises(RefbenchError, match="REFBENCH_WATCHDOG"):
            parse_env(bad, Limits(), total)


def test_disk_floor_leaves_room_for_what_the_run_was_checked_for(tmp_path):
    """The default reserve is lowered for a run the up-front check let through close to the
    limit: never more than half of what it left spare."""
    import shutil
    from types import SimpleNamespace

    need = shutil.disk_usage(tmp_path).free - (2 << 20)
    backend = SimpleNamespace()
    wd = Watchdog.for_run(backend, tmp_path, tmp_path, run_need=need, env="")
    # half of what was spare when the watchdog looked (free space moves while other tests write:
    # measured against this test's own reading, it failed by 4 KiB in a CI run)
    assert len(wd.disks) == 1 and wd.disks[0].floor <= (wd.disks[0].free_start - need) // 2 < 1 << 30
    wd = Watchdog.for_run(backend, tmp_path, tmp_path, run_need=0, env="disk=3G")
    assert wd.disks[0].floor == 3 * GIB


def test_started_outside_the_main_thread_it_only_records():
    """Started outside the main thread, it records but cannot interrupt anything."""
    import threading

    out = {}

    def body():
        wd = Watchdog(limits=Limits(interval=0.05)).start()
        time.sleep(0.2)
        wd.stop()
        out["samples"] = wd.samples

    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert out["samples"] >= 2


def test_ram_or_disk_counts_everything_the_server_keeps(tmp_path, monkeypatch):
    """Objects alone would fit in RAM; with the trash copy, MinIO's metadata and its own memory
    they do not, so the data goes to disk."""
    import shutil
    from collections import namedtuple

    from refbench.backends import minio

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(24 * GIB, 0, 24 * GIB))
    memory = lambda: 8 * GIB  # noqa: E731 — half of it: 4 GiB
    assert minio.minio_footprint(3 * GIB) == 6 * GIB + minio.MINIO_META_BYTES
    assert minio.minio_data_parent(1 * GIB, tmp_path, mem_available=memory) == minio.Path("/dev/shm")
    # 3.6 GiB + metadata + RSS > 4 GiB
    assert minio.minio_data_parent(int(1.8 * GIB), tmp_path, mem_available=memory) == tmp_path
