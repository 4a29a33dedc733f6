"""The real Kubernetes control plane as processes on this machine (`colocation sandbox --apiserver kube`).

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok, built from their Go
modules by hack/kube/build.sh, run here with the project installed from crds/ and manifests/
exactly as a user applies them. Layers, lowest first: `binaries` (where the build is), `pki`
(certificates and keys), `podnetwork` (network namespaces for pod addresses), `components` (the
control-plane processes), `restclient` (a small admin client), `kubelet` (the one real node: runs
the pods bound to it as processes), `fakenodes` (kwok nodes and the simulated agents),
`kube_sandbox` (puts it all together). Ports, tokens, kubeconfigs and stopping children are the
launcher's (sandbox.launcher), shared with the builtin sandbox.
"""
