"""Kubernetes API conventions shared by every server in the project: Status errors, selectors, list
and watch parameters, discovery documents, and the one way a watch is served.

Below every other layer: it imports nothing else from colocation. Pure code apart from
watch_stream (aiohttp), watch_queue and event_wait (asyncio), and stop_signals, the one way a
process (the operator, the agent, the sandbox, a benchmark) stops on SIGTERM or SIGINT; the sandbox,
the operator's aggregated API and the controllers build on it.
"""
