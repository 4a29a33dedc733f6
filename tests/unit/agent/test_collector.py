"""RealCollector on /proc and cgroup trees written by the tests, and once on this machine's /proc.

Expectations are worked by hand: with USER_HZ=100, 300 busy ticks over 2 s are 1.5 cpus =
1500m; 1,000,000 µs of cgroup cpu time over 2 s are 500m.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from colocation.agent import cgroups, procfs
from colocation.agent.collector import HostApplication, RealCollector, Sample
from tests.clock import FakeClock

KB = 1024
MI = 2**20
GI = 2**30
UID_A = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
UID_B = "6fa459ea-ee8a-3ca4-894e-db77e160355e"


class Machine:
    """A fake host: /proc and a cgroup root under a temporary directory."""

    def __init__(self, root: Path, *, cgroup_version: int = 2) -> None:
        self.proc = root / "proc"
        self.cgroup = root / "cgroup"
        self.proc.mkdir()
        self.cgroup.mkdir()
        self.version = cgroup_version
        if cgroup_version == 2:
            (self.cgroup / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
        else:
            (self.cgroup / "cpu,cpuacct").mkdir()
            (self.cgroup / "memory").mkdir()
        self.clock = FakeClock(1000.0)
        self.cpu(busy=1000)
        self.memory(total=8 * GI, free=1 * GI, available=5 * GI, inactive_file=2 * GI)

    def cpu(self, *, busy: int, cpus: int = 4) -> None:
        # user nice system idle iowait irq softirq steal guest guest_nice; busy split over the
        # counted fields, plus idle, iowait and steal that must not count.
        user, nice, system, irq, softirq = busy - 40, 10, 10, 10, 10
        lines = [f"cpu  {user} {nice} {system} 99999 777 {irq} {softirq} 555 0 0"]
        lines += [f"cpu{n} 1 1 1 1 1 1 1 1 0 0" for n in range(cpus)]
        lines += ["intr 12345", "ctxt 67890", "btime 1700000000", "processes 4242"]
        (self.proc / "stat").write_text("\n".join(lines) + "\n")

    def memory(self, *, total: int, free: int, available: int, inactive_file: int) -> None:
        (self.proc / "meminfo").write_text(
            f"MemTotal:       {total // KB} kB\nMemFree:        {free // KB} kB\n"
            f"MemAvailable:   {available // KB} kB\nBuffers:          1024 kB\n"
            f"Inactive(file): {inactive_file // KB} kB\nHugePages_Total:       0\n")

    def pressure(self, resource: str, text: str) -> None:
        (self.proc / "pressure").mkdir(exist_ok=True)
        (self.proc / "pressure" / resource).write_text(text)

    def pod(self, path: str, *, usage_usec: int, anon: int = 300 * MI, active_file: int = 50 * MI,
            inactive_file: int = 400 * MI) -> None:
        """A pod cgroup at `path` (relative) with cpu time and memory.stat lists."""
        if self.version == 2:
            directory = self.cgroup / path
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "cpu.stat").write_text(f"usage_usec {usage_usec}\nuser_usec 1\nsystem_usec 1\n")
            (directory / "memory.stat").write_text(
                f"anon {anon}\nfile {active_file + inactive_file}\ninactive_anon {anon // 3}\n"
                f"active_anon {anon - anon // 3}\ninactive_file {inactive_file}\nactive_file {active_file}\n"
                "unevictable 0\n")
            (directory / "memory.current").write_text(f"{anon + active_file + inactive_file + 7 * MI}\n")
        else:
            cpu = self.cgroup / "cpu,cpuacct" / path
            memory = self.cgroup / "memory" / path
            cpu.mkdir(parents=True, exist_ok=True)
            memory.mkdir(parents=True, exist_ok=True)
            (cpu / "cpuacct.usage").write_text(f"{usage_usec * 1000}\n")
            # v1 also has the non-hierarchical keys, which must not be the ones used.
            (memory / "memory.stat").write_text(
                f"cache 1\nrss 1\ninactive_anon 1\nactive_anon 1\ninactive_file 1\nactive_file 1\nunevictable 1\n"
                f"total_inactive_anon {anon // 3}\ntotal_active_anon {anon - anon // 3}\n"
                f"total_inactive_file {inactive_file}\ntotal_active_file {active_file}\ntotal_unevictable 0\n")

    def collector(self, **kwargs: object) -> RealCollector:
        return RealCollector(self.proc, self.cgroup, clock=self.clock, clock_ticks_per_second=100,
                             **kwargs)  # type: ignore[arg-type]

    def two_samples(self, collector: RealCollector, *, busy: int = 1300, seconds: float = 2.0) -> Sample:
        collector.sample(1.7e9)
        self.clock.now += seconds
        self.cpu(busy=busy)
        return collector.sample(1.7e9 + seconds)


SYSTEMD_BURSTABLE = f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_A.replace('-', '_')}.slice"
SYSTEMD_GUARANTEED = f"kubepods.slice/kubepods-pod{UID_B.replace('-', '_')}.slice"
CGROUPFS_BESTEFFORT = f"kubepods/besteffort/pod{UID_A}"
CGROUPFS_GUARANTEED = f"kubepods/pod{UID_B}"


@pytest.fixture
def machine(tmp_path: Path) -> Machine:
    return Machine(tmp_path)


def test_first_sample_has_no_cpu_rate_and_the_second_has_the_delta(machine: Machine) -> None:
    collector = machine.collector()
    first = collector.sample(1.7e9)
    assert (first.node_cpu_millis, first.node_cpu_measured) == (0, False)
    assert first.node_memory_bytes == 3 * GI  # MemTotal 8Gi - MemAvailable 5Gi
    machine.clock.now += 2
    machine.cpu(busy=1300)  # 300 ticks = 3 s of cpu in 2 s
    second = collector.sample(1.7e9 + 2)
    assert (second.node_cpu_millis, second.node_cpu_measured) == (1500, True)
    assert second.timestamp == 1.7e9 + 2  # wall time as given, not the monotonic clock


def test_counter_going_backwards_gives_no_rate_then_resumes_from_the_new_base(machine: Machine) -> None:
    collector = machine.collector()
    machine.two_samples(collector, busy=1300)
    machine.clock.now += 1
    machine.cpu(busy=50)  # reboot (or wrap): far below the last reading
    reset = collector.sample(1.7e9 + 3)
    assert (reset.node_cpu_millis, reset.node_cpu_measured) == (0, False)
    machine.clock.now += 1
    machine.cpu(busy=150)
    after = collector.sample(1.7e9 + 4)
    assert (after.node_cpu_millis, after.node_cpu_measured) == (1000, True)


def test_absurd_rate_is_capped_at_the_node_cpus(machine: Machine) -> None:
    collector = machine.collector()
    sample = machine.two_samples(collector, busy=1000 + 100 * 100, seconds=1)  # 100 cpus' worth, 4 cpus
    assert sample.node_cpu_millis == 4000


def test_a_clock_that_did_not_move_gives_no_rate(machine: Machine) -> None:
    collector = machine.collector()
    sample = machine.two_samples(collector, seconds=0)
    assert (sample.node_cpu_millis, sample.node_cpu_measured) == (0, False)


@pytest.mark.parametrize(("policy", "expected"), [
    ("usageWithoutPageCache", 3 * GI),  # 8Gi total - 5Gi available
    ("usageWithPageCache", 7 * GI),  # 8Gi total - 1Gi free
    ("usageWithHotPageCache", 5 * GI),  # 8Gi total - 1Gi free - 2Gi inactive file
])
def test_node_memory_per_policy(machine: Machine, policy: str, expected: int) -> None:
    assert machine.collector(memory_policy=policy).sample(0).node_memory_bytes == expected


def test_pressure_files_are_read_and_absent_ones_are_not_errors(machine: Machine) -> None:
    assert machine.collector().sample(0).psi == {}
    machine.pressure("cpu", "some avg10=1.50 avg60=0.75 avg300=0.20 total=123456\n")
    machine.pressure("io", "some avg10=0.00 avg60=0.00 avg300=0.00 total=7\n"
                           "full avg10=2.00 avg60=1.00 avg300=0.50 total=9\n")
    sample = machine.collector().sample(0)
    assert set(sample.psi) == {"cpu", "io"}
    assert sample.psi["cpu"].some.avg10 == 1.5
    assert sample.psi["cpu"].some.total_usec == 123456
    assert sample.psi["cpu"].full is None
    assert sample.psi["io"].full is not None and sample.psi["io"].full.avg300 == 0.5
    assert sample.read_errors == 0


def test_garbled_pressure_file_is_counted_not_raised(machine: Machine) -> None:
    machine.pressure("memory", "some avg10=oops\n")
    sample = machine.collector().sample(0)
    assert "memory" not in sample.psi
    assert sample.read_errors == 1


@pytest.mark.parametrize(("version", "layout"), [
    (2, (SYSTEMD_BURSTABLE, SYSTEMD_GUARANTEED)),
    (2, (CGROUPFS_BESTEFFORT, CGROUPFS_GUARANTEED)),
    (1, (SYSTEMD_BURSTABLE, SYSTEMD_GUARANTEED)),
    (1, (CGROUPFS_BESTEFFORT, CGROUPFS_GUARANTEED)),
], ids=["v2-systemd", "v2-cgroupfs", "v1-systemd", "v1-cgroupfs"])
def test_pods_are_found_and_measured_under_both_drivers_and_versions(
        tmp_path: Path, version: int, layout: tuple[str, str]) -> None:
    machine = Machine(tmp_path, cgroup_version=version)
    path_a, path_b = layout
    machine.pod(path_a, usage_usec=5_000_000)
    machine.pod(path_b, usage_usec=10_000_000, anon=30 * MI)
    collector = machine.collector()
    first = collector.sample(0)
    assert {(p.uid, p.cpu_measured) for p in first.pods} == {(UID_A, False), (UID_B, False)}
    machine.clock.now += 2
    machine.pod(path_a, usage_usec=6_000_000)  # 1 s of cpu in 2 s
    machine.pod(path_b, usage_usec=10_200_000, anon=30 * MI)  # 0.2 s in 2 s
    pods = {p.uid: p for p in collector.sample(2).pods}
    assert (pods[UID_A].cpu_millis, pods[UID_A].cpu_measured) == (500, True)
    assert (pods[UID_B].cpu_millis, pods[UID_B].cpu_measured) == (100, True)
    assert pods[UID_A].memory_bytes == 300 * MI  # anon + unevictable: page cache left out
    assert pods[UID_B].memory_bytes == 30 * MI
    assert pods[UID_A].cgroup_path == path_a


@pytest.mark.parametrize(("policy", "expected"), [
    ("usageWithoutPageCache", 300 * MI),
    ("usageWithHotPageCache", 350 * MI),  # + active file
    ("usageWithPageCache", 750 * MI),  # + active and inactive file
])
@pytest.mark.parametrize("version", [1, 2])
def test_pod_memory_per_policy(tmp_path: Path, version: int, policy: str, expected: int) -> None:
    machine = Machine(tmp_path, cgroup_version=version)
    machine.pod(SYSTEMD_BURSTABLE, usage_usec=1)
    (pod,) = machine.collector(memory_policy=policy).sample(0).pods
    assert pod.memory_bytes == expected


def test_pods_appearing_and_vanishing_between_samples(machine: Machine) -> None:
    collector = machine.collector()
    machine.pod(SYSTEMD_BURSTABLE, usage_usec=1_000_000)
    assert [p.uid for p in collector.sample(0).pods] == [UID_A]
    machine.clock.now += 1
    machine.pod(SYSTEMD_GUARANTEED, usage_usec=2_000_000)  # new: no rate yet
    pods = {p.uid: p for p in collector.sample(1).pods}
    assert pods[UID_A].cpu_measured and not pods[UID_B].cpu_measured
    for name in ("cpu.stat", "memory.stat", "memory.current"):
        (machine.cgroup / SYSTEMD_BURSTABLE / name).unlink()
    (machine.cgroup / SYSTEMD_BURSTABLE).rmdir()
    machine.clock.now += 1
    machine.pod(SYSTEMD_GUARANTEED, usage_usec=2_500_000)
    sample = collector.sample(2)
    assert [(p.uid, p.cpu_millis) for p in sample.pods] == [(UID_B, 500)]
    assert sample.read_errors == 0  # a pod that is gone is not an error
    # A pod recreated under the same UID starts over: its old counter is not reused.
    machine.pod(SYSTEMD_BURSTABLE, usage_usec=10)
    machine.clock.now += 1
    assert not next(p for p in collector.sample(3).pods if p.uid == UID_A).cpu_measured


def test_missing_or_garbled_pod_files_skip_that_pod_and_are_counted(machine: Machine) -> None:
    machine.pod(SYSTEMD_BURSTABLE, usage_usec=1_000_000)
    machine.pod(SYSTEMD_GUARANTEED, usage_usec=1_000_000)
    (machine.cgroup / SYSTEMD_BURSTABLE / "memory.stat").unlink()
    (machine.cgroup / SYSTEMD_GUARANTEED / "cpu.stat").write_text("nr_periods 0\n")
    collector = machine.collector()
    sample = collector.sample(0)
    assert sample.pods == ()
    assert sample.read_errors == 2
    collector.sample(1)
    assert collector.read_errors_total == 4


def test_a_pod_unreadable_for_a_while_keeps_its_base(machine: Machine) -> None:
    machine.pod(SYSTEMD_BURSTABLE, usage_usec=1_000_000)
    collector = machine.collector()
    collector.sample(0)
    stat = machine.cgroup / SYSTEMD_BURSTABLE / "cpu.stat"
    stat.write_text("garbled\n")
    machine.clock.now += 1
    assert collector.sample(1).pods == ()
    machine.clock.now += 1
    machine.pod(SYSTEMD_BURSTABLE, usage_usec=3_000_000)  # 2 s of cpu over the 2 s since the base
    (pod,) = collector.sample(2).pods
    assert (pod.cpu_millis, pod.cpu_measured) == (1000, True)


def test_counter_reset_of_a_pod_gives_no_rate(machine: Machine) -> None:
    machine.pod(SYSTEMD_BURSTABLE, usage_usec=9_000_000)
    collector = machine.collector()
    collector.sample(0)
    machine.clock.now += 1
    machine.pod(SYSTEMD_BURSTABLE, usage_usec=100)
    (pod,) = collector.sample(1).pods
    assert (pod.cpu_millis, pod.cpu_measured) == (0, False)


def test_unreadable_proc_files_are_counted_and_flagged(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    collector = RealCollector(tmp_path / "proc", tmp_path / "nothing", clock=FakeClock(1000.0))
    sample = collector.sample(5.0)
    assert not sample.node_cpu_measured and not sample.node_memory_measured
    assert sample.read_errors == 2
    assert sample.pods == () and sample.psi == {}


def test_host_applications_are_measured_like_pods(machine: Machine) -> None:
    machine.pod("system.slice/nginx.service", usage_usec=1_000_000)
    app = HostApplication(name="nginx", cgroup_path="/system.slice/nginx.service", priority="koord-prod", qos="LS")
    missing = HostApplication(name="gone", cgroup_path="system.slice/gone.service")
    collector = machine.collector(host_applications=[app, missing])
    collector.sample(0)
    machine.clock.now += 2
    machine.pod("system.slice/nginx.service", usage_usec=2_000_000)
    sample = collector.sample(2)
    assert [(a.name, a.cpu_millis, a.memory_bytes, a.qos) for a in sample.host_applications] == [
        ("nginx", 500, 300 * MI, "LS")]
    assert sample.read_errors == 1  # the missing one
    assert sample.pods == ()  # not under kubepods: not a pod


def test_kind_style_nested_kubelet_root_is_found(machine: Machine) -> None:
    nested = f"kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/" \
             f"kubelet-kubepods-besteffort-pod{UID_A.replace('-', '_')}.slice"
    machine.pod(nested, usage_usec=1)
    found, errors = cgroups.discover_pods(cgroups.detect_layout(machine.cgroup))  # type: ignore[arg-type]
    assert (found[UID_A].qos_tier, found[UID_A].path, errors) == ("besteffort", nested, 0)


@pytest.mark.parametrize(("name", "uid"), [
    (f"kubepods-burstable-pod{UID_A.replace('-', '_')}.slice", UID_A),
    (f"pod{UID_A}", UID_A),
    ("pod6f1ce7b2a4b94c1e8e1e9f0a6b1c2d3e", "6f1ce7b2a4b94c1e8e1e9f0a6b1c2d3e"),  # static pod: hash UID
    ("kubepods-burstable.slice", None),
    ("cri-containerd-0123abcd.scope", None),
    ("podcast", None),
])
def test_pod_uid_from_cgroup_directory_names(name: str, uid: str | None) -> None:
    assert cgroups.pod_uid_from_dir(name) == uid


def test_stat_parser_counts_koordlets_busy_fields_only() -> None:
    text = "cpu  100 20 30 5000 400 6 7 800 50 0\ncpu0 1 1 1 1 1 1 1 1 0 0\ncpu1 1 1 1 1 1 1 1 1 0 0\n"
    assert procfs.parse_stat(text) == procfs.CpuTimes(busy_ticks=100 + 20 + 30 + 6 + 7, cpus=2)
    assert procfs.parse_stat("cpu 1 2 3\n") is None
    assert procfs.parse_stat("intr 1\n") is None


def test_meminfo_without_memavailable_falls_back_to_free() -> None:
    info = procfs.parse_meminfo("MemTotal: 1000 kB\nMemFree: 400 kB\n")
    assert info is not None and info.available == 400 * KB
    assert procfs.node_memory_usage(info, "usageWithoutPageCache") == 600 * KB
    assert procfs.parse_meminfo("garbage\n") is None


def test_this_machines_proc_gives_plausible_numbers(tmp_path: Path) -> None:
    collector = RealCollector("/proc", "/sys/fs/cgroup")
    collector.sample(0)
    deadline = time.monotonic() + 0.3
    while time.monotonic() < deadline:  # burn some cpu so the interval has measurable work
        pass
    sample = collector.sample(1)
    meminfo = procfs.read_meminfo(Path("/proc"))
    times = procfs.read_cpu_times(Path("/proc"))
    assert meminfo is not None and times is not None
    assert 0 < sample.node_memory_bytes < meminfo.total
    # Within 5 % of total of an independent reading a moment later.
    assert abs(sample.node_memory_bytes - (meminfo.total - meminfo.available)) < meminfo.total * 0.05
    assert sample.node_cpu_measured
    assert 0 < sample.node_cpu_millis <= times.cpus * 1000
    assert sample.read_errors == 0


def test_a_file_answered_in_short_reads_is_read_to_its_end(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # procfs and cgroup files may answer a read with less than asked while more follows (a
    # record that does not fit waits for the next read): /proc/cpuinfo of a large machine.
    text = "".join(f"processor\t: {cpu}\nmodel name\t: test\n\n" for cpu in range(4096))
    (tmp_path / "cpuinfo").write_text(text)
    real_read = os.read
    monkeypatch.setattr(os, "read", lambda fd, size: real_read(fd, min(size, 1000)))
    assert cgroups.read_file(tmp_path / "cpuinfo") == text
    assert len(procfs.read_cpu_topology(tmp_path)) == 4096
