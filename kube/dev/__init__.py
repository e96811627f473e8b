"""A development Kubernetes cluster on loopback: etcd, kube-apiserver v1.20.2, a fake kubelet."""
