"""Image matrices, Packer rendering and builds, and the AMI catalog (`gpuforge.images`)."""
