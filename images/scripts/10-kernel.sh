#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Step 1: add the package repositories, fail early when FSx has no Lustre modules for the
# pinned kernel, then install, hold and select the pinned kernel. Packer reboots into it next.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
load_matrix

# shellcheck source=/dev/null
source "$ROOT/etc/os-release"
[[ "$ID" == "$GPUFORGE_DISTRO" && "$VERSION_ID" == "$GPUFORGE_RELEASE" ]] ||
    die "os: the base image runs $ID $VERSION_ID, the matrix declares $GPUFORGE_DISTRO $GPUFORGE_RELEASE"

if command -v cloud-init >/dev/null; then
    cloud-init status --wait >/dev/null || log "cloud-init reported a problem; continuing with provisioning"
fi

apt_update
apt-get install "${APT_OPTIONS[@]}" --no-install-recommends ca-certificates curl gnupg

# NVIDIA's CUDA repository (driver, fabric manager, CUDA, cuDNN, NCCL, DCGM). Key 3bf863cc,
# fingerprint EB693B3035CD5710E231E123A4B469963BF863CC: NVIDIA's repository signing key since
# April 2022 (https://developer.nvidia.com/blog/updating-the-cuda-linux-gpg-repository-key/).
cuda_repo="https://$NVIDIA_CUDA_HOST/compute/cuda/repos/${GPUFORGE_DISTRO}${GPUFORGE_RELEASE//./}/x86_64"
add_apt_repository cuda "$cuda_repo/3bf863cc.pub" EB693B3035CD5710E231E123A4B469963BF863CC "$cuda_repo/ /"

# NVIDIA Container Toolkit (https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html).
# Key fingerprint C95B321B61E88C1809C4F759DDCAE044F796ECB0 (libnvidia-container signing key).
# shellcheck disable=SC2016 # $(ARCH) is expanded by apt, not by the shell
add_apt_repository container-toolkit "https://$NVIDIA_TOOLKIT_HOST/libnvidia-container/gpgkey" \
    C95B321B61E88C1809C4F759DDCAE044F796ECB0 "https://$NVIDIA_TOOLKIT_HOST/libnvidia-container/stable/deb/\$(ARCH) /"

# FSx for Lustre client repository (https://docs.aws.amazon.com/fsx/latest/LustreGuide/install-lustre-client.html).
# AWS publishes no fingerprint for this key (its Lustre client guide gives only the URL): the file must hold
# one key, which is trusted from the HTTPS download, logged and recorded (lib.sh, add_apt_repository).
add_apt_repository fsx-lustre "https://fsx-lustre-client-repo-public-keys.s3.amazonaws.com/fsx-ubuntu-public-key.asc" \
    "" "https://$FSX_HOST/ubuntu $VERSION_CODENAME main"

apt_update

# FSx builds Lustre client modules per kernel build; an offline check cannot know which exist.
apt_resolve "$(pkg_lustre)" "$GPUFORGE_LUSTRE" "$FSX_HOST" >/dev/null ||
    die "lustre_client: FSx publishes no $(pkg_lustre) at Lustre $GPUFORGE_LUSTRE, so kernel $GPUFORGE_KERNEL cannot mount FSx; pin a kernel FSx builds Lustre $GPUFORGE_LUSTRE modules for (apt-cache madison 'lustre-client-modules-*')"

kernel_packages=("linux-image-$GPUFORGE_KERNEL" "linux-modules-$GPUFORGE_KERNEL" "linux-headers-$GPUFORGE_KERNEL")
for package in "${kernel_packages[@]}"; do
    apt-cache show "$package" >/dev/null 2>&1 || die "kernel: package $package does not exist in the base image's repositories"
done
log "installing kernel $GPUFORGE_KERNEL"
apt-get install "${APT_OPTIONS[@]}" --no-install-recommends "${kernel_packages[@]}"
hold "${kernel_packages[@]}"

# Keep kernel metapackages from pulling a newer kernel in.
mapfile -t metapackages < <(dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' 'linux-aws*' 'linux-image-aws*' \
    'linux-headers-aws*' 'linux-generic*' 'linux-virtual*' 2>/dev/null | awk '$1 == "ii" { print $2 }')
if ((${#metapackages[@]})); then
    apt-mark hold "${metapackages[@]}" >/dev/null
fi

# Boot the pinned kernel even when the base image carries a newer one.
mkdir -p "$ROOT/etc/default/grub.d"
cat >"$ROOT/etc/default/grub.d/99-gpuforge-kernel.cfg" <<GRUB
GRUB_DEFAULT="Advanced options for Ubuntu>Ubuntu, with Linux $GPUFORGE_KERNEL"
GRUB
update-grub
log "kernel $GPUFORGE_KERNEL installed and selected; rebooting into it"
