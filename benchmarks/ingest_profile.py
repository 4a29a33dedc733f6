"""Where the leader's time goes while it ingests: py-spy samples of the running process.

`py-spy record --format raw` writes one line per distinct stack, `frame;frame;… COUNT`. The
summary groups the samples by what they were doing, by the innermost frame of ours or of the
libraries that matter, so that a reader sees "validation 25 %" rather than 40 pydantic frames.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

# (label, a substring of a frame): a sample counts for the first rule any of its frames matches,
# checked in this order, so the more specific activities come first.
ACTIVITIES: tuple[tuple[str, str], ...] = (
    ("TokenReview (kubernetes-asyncio call)", "kube_token_reviewer"),
    ("SubjectAccessReview (kubernetes-asyncio call)", "kube_subject_access_reviewer"),
    ("proxy and .netrc lookups in threads (aiohttp trust_env)", "get_env_proxy_for_url"),
    ("proxy and .netrc lookups in threads (aiohttp trust_env)", "netrc_from_env"),
    ("proxy and .netrc lookups in threads (aiohttp trust_env)", "_get_netrc_auth"),
    ("thread pool hand-offs", "concurrent/futures/thread.py"),
    ("thread pool hand-offs", "call_soon_threadsafe"),
    ("thread pool hand-offs", "_read_from_self"),
    ("thread pool hand-offs", "_chain_future"),
    ("thread pool hand-offs", "run_in_executor"),
    ("review requests: aiohttp client", "aiohttp/client"),
    ("kubernetes-asyncio client (review responses)", "kubernetes_asyncio"),
    ("validation: pydantic-core parse and checks", "validate_json"),
    ("validation: pydantic-core parse and checks", "_parsed (colocation/nodemetrics/report_schema.py"),
    ("validation: the rest", "validate_report"),
    ("store: put, event, watch fan-out", "NodeMetricStore"),
    ("watch streams: writing events", "NodeMetricGroup._watch"),
    ("lists and Tables", "NodeMetricGroup._list_or_watch"),
    ("authentication and authorization (cache hits)", "NodeMetricGroup._caller"),
    ("authentication and authorization (cache hits)", "DelegatingAuthorizer.authorize"),
    ("request metrics (prometheus_client)", "prometheus_client"),
    ("reading the body", "NodeMetricGroup._read_body"),
    ("handler, rest", "NodeMetricGroup._report"),
    ("response: TLS encryption and send", "finish_response"),
    ("request: TLS decryption and HTTP parsing", "_read_ready"),
    ("aiohttp request handling, rest", "web_protocol.py"),
    ("Node informer", "informer"),
    ("event loop and other", ""),
)


@dataclass(frozen=True)
class Profile:
    samples: int
    activities: list[tuple[str, float]]  # (label, share of samples), largest first
    hottest: list[tuple[str, float]]  # innermost frames by share of samples
    raw_path: Path


def summarize(raw: str) -> tuple[int, list[tuple[str, float]], list[tuple[str, float]]]:
    """(samples, activities by share, innermost frames by share) of py-spy's raw output."""
    activities: Counter[str] = Counter()
    innermost: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rstrip().rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = stack.split(";")
        innermost[frames[-1]] += count
        label = next(label for label, marker in ACTIVITIES if any(marker in frame for frame in frames))
        activities[label] += count
    if not total:
        return 0, [], []
    return (total, [(label, n / total) for label, n in activities.most_common()],
            [(frame, n / total) for frame, n in innermost.most_common(12)])


def py_spy() -> str | None:
    """The py-spy executable next to this Python, else on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


async def record(pid: int, seconds: float, out: Path) -> asyncio.subprocess.Process:
    """Start sampling `pid` for `seconds` (100 Hz, without pausing it); await .wait() for the end."""
    executable = py_spy()
    if executable is None:
        raise FileNotFoundError("py-spy")
    out.parent.mkdir(parents=True, exist_ok=True)
    return await asyncio.create_subprocess_exec(
        executable, "record", "--pid", str(pid), "--duration", str(max(1, round(seconds))), "--rate", "100",
        "--format", "raw", "--nonblocking", "-o", str(out),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)


def load(out: Path) -> Profile | None:
    if not out.exists():
        return None
    samples, activities, hottest = summarize(out.read_text())
    return Profile(samples, activities, hottest, out) if samples else None
