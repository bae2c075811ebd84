"""Kubernetes (EKS) objects for a gpuforge cluster: pinned add-ons and Kueue's queues, from the stack config.

See `manifests.render_addons`; pins and their sources are in `gpuforge/data/kubernetes_addons.yaml`.
"""
