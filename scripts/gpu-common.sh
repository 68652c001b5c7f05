# Shared by the GPU scripts (source it). Never changes the GPU's settings.

# Registers NVIDIA's OpenCL driver with the ICD loader where no ICD file names it (the device
# machine ships none; see ../shared/docs/gpu-facts.md).
register_nvidia_icd() {
  grep -qs libnvidia-opencl /etc/OpenCL/vendors/*.icd && return 0
  local lib
  for lib in /usr/lib/libnvidia-opencl.so.1 /usr/lib/x86_64-linux-gnu/libnvidia-opencl.so.1 /usr/local/nvidia/lib64/libnvidia-opencl.so.1; do
    if [ -e "$lib" ]; then mkdir -p /etc/OpenCL/vendors && echo "$lib" > /etc/OpenCL/vendors/nvidia.icd; return 0; fi
  done
}

# The device VM grows its RAM on first use (about 3 s per 8 GiB): touch GIB GiB once, free it,
# and let the kernel settle, so that pin times measure pinning and not the VM's growth.
warm_vm_memory() {
  python3 -c "b = bytearray($1 << 30); b[::4096] = b'\x01' * (len(b) // 4096)"
  sleep "${2:-10}"
}

# Sets CL_INC (the folder holding CL/cl.h: the system's, else the CUDA toolkit's; empty if
# none) and CL_LIB (the libOpenCL.so.1 programs get: the loader cache's, else the toolkit's),
# for building C programs against OpenCL on the GPU machine.
find_opencl_dev() {
  CL_INC=""
  for d in /usr/include /usr/local/cuda/include /usr/local/cuda/targets/x86_64-linux/include; do
    [ -e "$d/CL/cl.h" ] && { CL_INC=$d; break; }
  done
  CL_LIB=$(ldconfig -p | awk '/libOpenCL\.so\.1 / {print $NF; exit}')
  [ -n "$CL_LIB" ] || CL_LIB=$(ls /usr/local/cuda/targets/x86_64-linux/lib/libOpenCL.so.1 2>/dev/null)
}

# Vulkan through NVIDIA's driver on the GPU machine, which has no loader and whose shipped ICD
# file names libGLX_nvidia.so.0 (fails headless): an ICD file naming libEGL_nvidia.so.0 in DIR
# (VK_DRIVER_FILES), and the loader build-gpu-bundle.sh carried in BIN_DIR/vulkan (alone in
# its folder, so nothing else of the bundle joins the library path) on the library path, and
# the Vulkan headers it carried on CPATH.
#   use_nvidia_vulkan BIN_DIR DIR
use_nvidia_vulkan() {
  local egl icd="$2/nvidia_icd_egl.json"
  for egl in /usr/local/nvidia/lib64/libEGL_nvidia.so.0 /usr/lib/x86_64-linux-gnu/libEGL_nvidia.so.0; do
    [ -e "$egl" ] && break
  done
  mkdir -p "$2"
  printf '{"file_format_version":"1.0.1","ICD":{"library_path":"%s","api_version":"1.4.312"}}\n' "$egl" > "$icd"
  export VK_DRIVER_FILES=$icd VK_ICD_FILENAMES=$icd
  export LD_LIBRARY_PATH="$1/vulkan${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # The Vulkan headers for the C suite's Vulkan program (build-gpu-bundle.sh carried them).
  export CPATH="$1/vulkan-include${CPATH:+:$CPATH}"
}
