#!/usr/bin/env bash
# The whole gpuforge flow on a fresh machine, with no AWS account:
#   check the shipped image matrices, build the p5-prod stack's image (and those of the other
#   shipped stacks) with real packer against a local AWS emulator on 127.0.0.1, then plan the
#   p5-prod training stack
#   offline against that image and print the cluster summary and policy verdicts, then
#   render the Slurm config its controller serves and the monitoring it runs (Prometheus,
#   Alertmanager, the alert and recording rules, dcgm-exporter's field list).
# Usage: scripts/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."

stack_dir=stacks/training
stack=p5-prod
local_catalog=images/catalog.local

step() {
    printf '\n==> %s\n' "$*"
}

step "Preparing this machine: Debian's packer, and a virtual environment (.venv) with gpuforge and the local AWS emulator"
scripts/bootstrap.sh local
gpuforge=.venv/bin/gpuforge

# The matrix and region come from each stack's own config, so the images built are the ones the
# stacks pin: p5-prod's first, then those of the other shipped stacks, so every one plans at once.
# (-P: do not put this checkout's folders ahead of the installed package.)
mapfile -t images < <(
    .venv/bin/python -P -c '
import sys
from pathlib import Path
from gpuforge.stack_config import load_stack_config
stack_dir, first = Path(sys.argv[1]), sys.argv[2]
stacks = [first] + sorted(p.name[len("Pulumi."):-len(".yaml")] for p in stack_dir.glob("Pulumi.*.yaml"))
seen = []
for stack in stacks:
    config = load_stack_config(stack_dir, stack)
    image = f"{config.matrix_path.relative_to(Path.cwd())} {config.region}"
    if image not in seen:
        seen.append(image)
print("\n".join(seen))
' "$stack_dir" "$stack"
)
read -r matrix region <<<"${images[0]}"

step "1/5 Checking every shipped image matrix: exact pins, and each compatibility rule with its source (gpuforge matrix check)"
"$gpuforge" matrix check images/matrices/*.yaml

step "2/5 Building the ${stack} stack's image from ${matrix} for ${region}: real packer against the AWS emulator on 127.0.0.1, recorded in ${local_catalog}"
"$gpuforge" image build "$matrix" --region "$region" --local
for image in "${images[@]:1}"; do
    read -r other_matrix other_region <<<"$image"
    step "2/5 ... and the image of the other shipped stacks that pin ${other_matrix} (${other_region}), so they plan too"
    "$gpuforge" image build "$other_matrix" --region "$other_region" --local
done

step "3/5 Planning ${stack_dir} --stack ${stack}: its own Pulumi program under the SDK's mocks, with the AMI from ${local_catalog}, checked by the policy pack"
"$gpuforge" plan "$stack_dir" --stack "$stack" --catalog "$local_catalog"

step "3/5 (EKS) Planning ${stack_dir} --stack p5-eks: the same cluster scheduled by EKS (same matrix, same AMI): control plane, node groups, access entries, when EKS scales the Capacity Block group down, and the add-ons and Kueue objects gpuforge scheduler render writes"
"$gpuforge" plan "$stack_dir" --stack p5-eks --catalog "$local_catalog"

slurm_dir=.gpuforge/slurm/${stack}
step "4/5 Rendering the Slurm config the ${stack} controller serves to its nodes (gpuforge scheduler render), into ${slurm_dir}"
"$gpuforge" scheduler render "$stack_dir" --stack "$stack" --out "$slurm_dir"
for file in slurm.conf gres.conf; do
    printf '\n--- %s\n' "$slurm_dir/$file"
    cat "$slurm_dir/$file"
done

kubernetes_dir=.gpuforge/kubernetes/p5-eks
step "4/5 (EKS) Rendering the Kubernetes objects gpuforge scheduler apply puts on the p5-eks cluster (gpuforge scheduler render), into ${kubernetes_dir}"
"$gpuforge" scheduler render "$stack_dir" --stack p5-eks --out "$kubernetes_dir"

monitoring_dir=.gpuforge/monitoring/${stack}
step "5/5 Rendering the monitoring the ${stack} controller runs (gpuforge monitoring render), into ${monitoring_dir}"
"$gpuforge" monitoring render "$stack_dir" --stack "$stack" --out "$monitoring_dir"
(cd "$monitoring_dir" && find . -type f | sort)
