#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR disable=SC2153 # GPUFORGE_* values come from matrix.env
# The Kubernetes node parts the matrix pins (its `kubernetes` block): the kubelet (dl.k8s.io's binary),
# containerd, runc, the CNI plugins and aws-iam-authenticator (their GitHub release builds) and cloud-provider-aws's
# ecr-credential-provider (artifacts.k8s.io's binary), each checked against the matrix's sha256 before anything is
# installed; the kubelet's image credential provider configuration, so it pulls private ECR images (the EKS
# add-ons among them) with the node's instance role; containerd's configuration with NVIDIA's container runtime (the
# matrix's container_toolkit, installed by 70-container-toolkit.sh) as the default runtime; and the
# kubelet's units, with the boot gate that starts it only after this boot's node check passed
# (kubelet-gpuforge.conf, as slurmd-gpuforge.conf gates slurmd). Nothing is started here: the kubelet is
# enabled, and runs at boot only where the user data wrote the join configuration kubelet.service names.
#
# A matrix without the block (Slurm only) builds an image without these parts.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
load_matrix

if [[ -z "$GPUFORGE_KUBERNETES_VERSION" ]]; then
    log "kubernetes: the matrix pins no Kubernetes node parts; skipping"
    exit 0
fi
[[ -x "$ROOT/usr/bin/nvidia-container-runtime" ]] ||
    die "kubernetes: /usr/bin/nvidia-container-runtime is missing; 70-container-toolkit.sh installs it before this step"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# Every pinned download is checked before the first is installed.
declare -A urls=([kubelet]="$GPUFORGE_KUBELET_URL" [containerd]="$GPUFORGE_CONTAINERD_URL"
    [runc]="$GPUFORGE_RUNC_URL" [cni_plugins]="$GPUFORGE_CNI_PLUGINS_URL"
    [aws_iam_authenticator]="$GPUFORGE_AWS_IAM_AUTHENTICATOR_URL"
    [ecr_credential_provider]="$GPUFORGE_ECR_CREDENTIAL_PROVIDER_URL")
declare -A sums=([kubelet]="$GPUFORGE_KUBELET_SHA256" [containerd]="$GPUFORGE_CONTAINERD_SHA256"
    [runc]="$GPUFORGE_RUNC_SHA256" [cni_plugins]="$GPUFORGE_CNI_PLUGINS_SHA256"
    [aws_iam_authenticator]="$GPUFORGE_AWS_IAM_AUTHENTICATOR_SHA256"
    [ecr_credential_provider]="$GPUFORGE_ECR_CREDENTIAL_PROVIDER_SHA256")
for name in "${KUBERNETES_PARTS[@]}"; do
    download_checked "${urls[$name]}" "${sums[$name]}" "$work/$name"
done

install -D -m 0755 "$work/kubelet" "$ROOT$KUBELET_BIN"
install -D -m 0755 "$work/runc" "$ROOT$RUNC_BIN"
install -D -m 0755 "$work/aws_iam_authenticator" "$ROOT$AUTHENTICATOR_BIN"
# The kubelet runs a provider by its name from its own folder (kubelet.service's --image-credential-provider-bin-dir).
install -D -m 0755 "$work/ecr_credential_provider" "$ROOT$CREDENTIAL_PROVIDER_BIN_DIR/ecr-credential-provider"
# containerd's release tarball holds bin/containerd, its shims and ctr.
mkdir -p "$ROOT/usr/local"
tar -xzf "$work/containerd" -C "$ROOT/usr/local" --no-same-owner bin/
mkdir -p "$ROOT$CNI_BIN_DIR"
tar -xzf "$work/cni_plugins" -C "$ROOT$CNI_BIN_DIR" --no-same-owner
log "kubernetes: kubelet $GPUFORGE_KUBELET, containerd $GPUFORGE_CONTAINERD, runc $GPUFORGE_RUNC, CNI plugins $GPUFORGE_CNI_PLUGINS, aws-iam-authenticator $GPUFORGE_AWS_IAM_AUTHENTICATOR, ecr-credential-provider $GPUFORGE_ECR_CREDENTIAL_PROVIDER for control plane $GPUFORGE_KUBERNETES_VERSION"

files="$GPUFORGE_PAYLOAD/kubernetes"
install -D -m 0644 "$files/containerd-config.toml" "$ROOT$CONTAINERD_CONFIG"
install -D -m 0644 "$files/ecr-credential-provider.yaml" "$ROOT$CREDENTIAL_PROVIDER_CONFIG"
install -D -m 0644 "$files/containerd.service" "$ROOT/etc/systemd/system/containerd.service"
install -D -m 0644 "$files/kubelet.service" "$ROOT/etc/systemd/system/kubelet.service"
install -D -m 0644 "$files/kubelet-gpuforge.conf" "$ROOT/etc/systemd/system/kubelet.service.d/gpuforge.conf"
# The periodic node check of a Kubernetes node (Slurm's is slurmd's HealthCheckProgram): installed, never
# enabled here; the EKS join user data enables its timer, so only a Kubernetes node runs it.
for unit in gpuforge-kubernetes-check.service gpuforge-kubernetes-check.timer; do
    install -D -m 0644 "$files/$unit" "$ROOT/etc/systemd/system/$unit"
done
# Enabled, not started: the kubelet starts at boot behind the node check's gate, containerd with it.
systemctl daemon-reload
systemctl enable kubelet.service
