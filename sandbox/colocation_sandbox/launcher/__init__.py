"""`colocation sandbox`: starting the API server and the processes that run against it.

Two API servers, one command line (`sandbox_cli`). The builtin one (`builtin_sandbox`: the
in-memory sandbox.server on loopback HTTPS) runs with `operator_replicas` and `sandbox_nodes`
as `sandbox_runner` puts them together, the project installed by `project_install`; the real
control plane is `controlplane`. What every launcher does with its children (ports, tokens,
stopping them, state files) is `child_processes`; the kubeconfigs they get, `kubeconfig_files`.
"""
