"""Render a checked matrix into a Packer HCL2 build: the build file, the plugin file, the payload.

The build file holds the amazon-ebs source and the build; the `packer {}` block
with `required_plugins` lives in its own file, because Debian's packer 1.6.6
cannot parse it but validates and builds the build file by path, while 1.11+
runs `packer init` on the folder. Fields only 1.11+ accepts (`imds_support`,
`metadata_options`) are rendered only for it: 1.6.6 rejects them.

A `--local` render differs in three places only: the EC2 endpoint points at the
emulator, credentials are not validated, and the communicator is `none`. With
no communicator there is nothing to provision through (packer 1.6.6 fails any
upload or script with "not implemented when communicator = 'none'"), so the
provisioners are left out; everything else, tags included, is the same.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from gpuforge.errors import InputError
from gpuforge.images import hcl
from gpuforge.images.disk import ROOT_VOLUME_GIB
from gpuforge.images.hcl import Attr, Blank, Block, Comment, Expr
from gpuforge.images.matrix import Matrix
from gpuforge.images.payload import write_payload
from gpuforge.images.sbom import IMAGE_PACKAGES, PACKAGES_FILE
from gpuforge.images.tags import ami_tags

BUILD_FILE = "gpuforge.pkr.hcl"
PLUGINS_FILE = "plugins.pkr.hcl"
PAYLOAD_DIR = "payload"
PACKER_MANIFEST = "packer-manifest.json"
SOURCE_NAME = "gpu-node"
SOURCE_REF = f"source.amazon-ebs.{SOURCE_NAME}"
PAYLOAD_DEST = "/tmp/gpuforge"

# Pinned exactly like everything else; released 2025-08-27.
# Source: https://releases.hashicorp.com/packer-plugin-amazon ; https://pkg.go.dev/github.com/hashicorp/packer-plugin-amazon
AMAZON_PLUGIN_SOURCE = "github.com/hashicorp/amazon"
AMAZON_PLUGIN_VERSION = "1.4.0"

# The build compiles the NVIDIA, EFA and Lustre modules and installs packages: it needs CPUs and
# network, not a GPU (the node agent checks the loaded driver and EFA devices at boot). x86_64 like
# every GPU target gpuforge knows; 16 vCPUs keep the DKMS builds short.
BUILDER_INSTANCE_TYPE = "c6i.4xlarge"
# gp3's baseline, which packer 1.6.6 requires to be stated for gp3.
# Source: https://docs.aws.amazon.com/ebs/latest/userguide/general-purpose.html#gp3-ebs-volume-type
GP3_THROUGHPUT_MIBPS = 125
GP3_IOPS = 3000

# What gpuforge's provisioning scripts support, and each distribution's login user and root device.
# Ubuntu AMIs log in as "ubuntu" (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/managing-users.html);
# Canonical registers their root device as /dev/sda1. `image build` reads the base AMI's real root
# device and renders that; the default here serves an offline `image render`.
DISTROS: dict[str, tuple[str, str]] = {"ubuntu": ("ubuntu", "/dev/sda1")}

# Letters, digits and ( ) [ ] . / - ' @ _ are the characters an AMI name may hold.
# Source: https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_RegisterImage.html (Name)
_AMI_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9()\[\]./\-'@_]")

# The provisioning steps in the order the image pipeline requires. The kernel step ends in a
# reboot into the pinned kernel; the verification step comes last and writes the manifest.
STEPS: tuple[str, ...] = (
    "10-kernel.sh",
    "20-nvidia-driver.sh",
    "30-fabricmanager.sh",
    "40-cuda.sh",
    "45-slurm.sh",
    "50-efa.sh",
    "55-nccl-tests.sh",
    "60-lustre.sh",
    "70-container-toolkit.sh",
    "72-kubernetes.sh",
    "75-dcgm.sh",
    "77-monitoring.sh",
    "80-system.sh",
    "85-gpuforge.sh",
    "90-verify.sh",
)
REBOOT_AFTER = "10-kernel.sh"


@dataclass(frozen=True)
class RenderOptions:
    """How to render: for which region and packer, and whether against the emulator."""

    region: str
    imds: bool
    endpoint: str | None = None
    force: bool = False
    root_device: str | None = None


@dataclass(frozen=True)
class RenderedBuild:
    directory: Path
    build_file: Path
    plugins_file: Path
    payload: Path
    ami_name: str


def ami_name(matrix: Matrix, digest: str) -> str:
    """Deterministic per matrix: name, version and the first 12 digits of the digest."""
    return _AMI_NAME_UNSAFE.sub("-", f"gpuforge-{matrix.name}-{matrix.version}-{digest[:12]}")


def distro_defaults(matrix: Matrix) -> tuple[str, str]:
    """The login user and default root device of the matrix's distribution, if the scripts support it."""
    found = DISTROS.get(matrix.os.distro)
    if found is None:
        raise InputError(
            f"os.distro: gpuforge's provisioning scripts support {', '.join(DISTROS)}; the matrix asks for "
            f"{matrix.os.distro!r}. Fix: use an Ubuntu base image, or add scripts for that distribution."
        )
    return found


def base_ami(matrix: Matrix, region: str) -> str:
    """The pinned base AMI for the region, or an InputError naming the regions the matrix pins."""
    ami = matrix.os.base_ami.get(region)
    if ami is None:
        raise InputError(
            f"os.base_ami: the matrix pins no base AMI for region {region!r} (it pins "
            f"{', '.join(sorted(matrix.os.base_ami))}). Fix: add os.base_ami.{region} with the exact AMI id, "
            "or build in a pinned region."
        )
    return ami


def _source(matrix: Matrix, digest: str, options: RenderOptions) -> Block:
    user, default_root = distro_defaults(matrix)
    tags = ami_tags(matrix, digest)
    body: list[hcl.Item] = [
        Attr("region", options.region),
        Attr("source_ami", base_ami(matrix, options.region)),
        Attr("instance_type", BUILDER_INSTANCE_TYPE),
        Attr("ami_name", ami_name(matrix, digest)),
        Attr("ami_description", f"gpuforge {matrix.name} {matrix.version} (matrix digest {digest})"),
        Attr("ena_support", True),
        Attr("sriov_support", True),
        Attr("ssh_username", user),
        Attr("communicator", "none" if options.endpoint else "ssh"),
    ]
    if options.endpoint:
        body += [Attr("custom_endpoint_ec2", options.endpoint), Attr("skip_credential_validation", True)]
    if options.force:
        body += [Attr("force_deregister", True), Attr("force_delete_snapshot", True)]
    if options.imds:
        body.append(Attr("imds_support", "v2.0"))
    body += [
        Blank(),
        Block(
            "launch_block_device_mappings",
            body=(
                Attr("device_name", options.root_device or default_root),
                Attr("volume_size", ROOT_VOLUME_GIB),
                Attr("volume_type", "gp3"),
                Attr("throughput", GP3_THROUGHPUT_MIBPS),
                Attr("iops", GP3_IOPS),
                Attr("encrypted", True),
                Attr("delete_on_termination", True),
            ),
        ),
    ]
    if options.imds:
        body += [
            Blank(),
            Block(
                "metadata_options",
                body=(
                    Attr("http_endpoint", "enabled"),
                    Attr("http_tokens", "required"),
                    Attr("http_put_response_hop_limit", 1),
                ),
            ),
        ]
    body += [Blank(), Attr("tags", tags), Attr("snapshot_tags", tags)]
    return Block("source", ("amazon-ebs", SOURCE_NAME), tuple(body))


def _provisioners() -> list[hcl.Item]:
    """Upload the payload, then run each step as root; reboot into the pinned kernel after step 1."""
    items: list[hcl.Item] = [
        Blank(),
        Block("provisioner", ("shell",), (Attr("inline", [f"mkdir -p {PAYLOAD_DEST}"]),)),
        Blank(),
        Block(
            "provisioner",
            ("file",),
            (Attr("source", Expr(f'"${{path.root}}/{PAYLOAD_DIR}/"')), Attr("destination", PAYLOAD_DEST)),
        ),
    ]
    after_reboot = False
    for step in STEPS:
        body: list[hcl.Item] = [Attr("inline", [f"sudo bash {PAYLOAD_DEST}/scripts/{step}"])]
        if after_reboot:
            body.append(Attr("pause_before", "30s"))
            after_reboot = False
        items += [Blank(), Block("provisioner", ("shell",), tuple(body))]
        if step == REBOOT_AFTER:
            reboot = (
                Attr("inline", ["sudo systemctl reboot"]),
                Attr("expect_disconnect", True),
                Attr("skip_clean", True),
            )
            items += [Blank(), Block("provisioner", ("shell",), reboot)]
            after_reboot = True
    # The package list the verify step wrote, for the SBOM beside the catalog record (sbom.py).
    download = (
        Attr("direction", "download"),
        Attr("source", IMAGE_PACKAGES),
        Attr("destination", Expr(f'"${{path.root}}/{PACKAGES_FILE}"')),
    )
    items += [Blank(), Block("provisioner", ("file",), download)]
    return items


def build_file_text(matrix: Matrix, digest: str, options: RenderOptions) -> str:
    build: list[hcl.Item] = [Attr("sources", [SOURCE_REF])]
    if not options.endpoint:
        build += _provisioners()
    build += [
        Blank(),
        Block(
            "post-processor",
            ("manifest",),
            (Attr("output", Expr(f'"${{path.root}}/{PACKER_MANIFEST}"')), Attr("strip_path", True)),
        ),
    ]
    items: list[hcl.Item] = [
        Comment(f"Rendered by gpuforge from matrix {matrix.name} {matrix.version}, digest {digest}."),
        Comment("Do not edit: change the matrix and render again."),
        Blank(),
        _source(matrix, digest, options),
        Blank(),
        Block("build", body=tuple(build)),
    ]
    return hcl.render(items)


def plugins_file_text() -> str:
    plugin = {"source": AMAZON_PLUGIN_SOURCE, "version": AMAZON_PLUGIN_VERSION}
    items: list[hcl.Item] = [
        Comment("Read by `packer init` on packer 1.7+; packer 1.6.6 builds the build file by path instead."),
        Block("packer", body=(Block("required_plugins", body=(Attr("amazon", plugin),)),)),
    ]
    return hcl.render(items)


def _claim_out_dir(out: Path) -> Path:
    """A fresh sibling folder to render into, so a failure never leaves `out` half-written."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError(
            f"{out}: the output folder exists and is not empty; rendering would mix old and new files. "
            "Fix: pass a new or empty folder to --out."
        )
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    except (OSError, ValueError) as error:  # ValueError: a NUL byte in the path
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise InputError(
            f"{out}: cannot create the output folder ({reason}). "
            "Fix: pass an --out folder whose parent exists or can be created and that you may write to."
        ) from None


@contextmanager
def staged_out_dir(out: Path, what: str) -> Iterator[Path]:
    """A fresh sibling folder to fill; on leaving, it becomes `out` (new or empty) whole, or is removed.

    `what` names the content in the error a full disk or a taken `out` gives. One mechanism for every
    command that writes a folder of files: the rendered build, the acceptance container's build context."""
    staging = _claim_out_dir(out)
    try:
        staging.chmod(0o755)
        yield staging
        if out.exists():
            out.rmdir()
        staging.replace(out)
    except OSError as error:  # a full disk, or --out taken by another writer meanwhile
        shutil.rmtree(staging, ignore_errors=True)
        raise InputError(
            f"{out}: cannot write {what} ({error.strerror or error}). "
            "Fix: pass a new or empty --out folder on a disk with free space."
        ) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def render(matrix: Matrix, digest: str, options: RenderOptions, out: Path) -> RenderedBuild:
    """Write the build into `out` (new or empty): all files appear at once or not at all."""
    build_text = build_file_text(matrix, digest, options)
    with staged_out_dir(out, "the rendered build") as staging:
        (staging / BUILD_FILE).write_text(build_text, encoding="utf-8")
        (staging / PLUGINS_FILE).write_text(plugins_file_text(), encoding="utf-8")
        write_payload(staging / PAYLOAD_DIR, matrix, digest)
    return RenderedBuild(
        directory=out,
        build_file=out / BUILD_FILE,
        plugins_file=out / PLUGINS_FILE,
        payload=out / PAYLOAD_DIR,
        ami_name=ami_name(matrix, digest),
    )
