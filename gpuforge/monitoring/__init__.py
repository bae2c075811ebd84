"""The metrics layer: Prometheus, Alertmanager, their rules and dcgm-exporter's field list.

Rendered from the stack config (`gpuforge:monitoring`, gpuforge.monitoring.config), the
hardware catalog (GPU architecture, GPU count, NVLink) and gpuforge's data files
(gpuforge/data/monitoring_*.yaml, gpuforge/data/xid_catalog.json), so the alerts act on
the same Xid catalog as the node agent. `gpuforge monitoring render` writes the set
(gpuforge.monitoring.cli); tests/monitoring checks it with the real promtool and amtool.
"""
