//! The dispatch table's layout, pinned to Khronos' CL/cl_icd.h: the layer hands the loader a
//! `cl_icd_dispatch` (opencl-sys's declaration of that header's struct) and reads the
//! loader's. A C program built against the system header prints the offset of every field and
//! the struct's size; each must match the Rust struct, and the fields must fill the struct
//! with no gap, so that no field is missing from the list below.
//!
//! Needs a C compiler (`cc`) and the OpenCL headers (Debian: opencl-c-headers, pulled in by
//! ocl-icd-opencl-dev); it fails, saying so, where they are missing.
#![cfg(unix)] // the layer is a Linux ICD-loader / LD_PRELOAD layer (see the crate docs)

mod common;

use opencl_sys::cl_icd::cl_icd_dispatch;
use pinstream_layer::ffi::layer::KHRONOS_ENTRIES;
use std::mem::offset_of;

macro_rules! fields {
    ($($f:ident),* $(,)?) => {
        vec![$((stringify!($f), offset_of!(cl_icd_dispatch, $f))),*]
    };
}

/// Every field of `cl_icd_dispatch` in Khronos' CL/cl_icd.h (OpenCL 3.0), in order.
fn khronos_fields() -> Vec<(&'static str, usize)> {
    fields!(
        clGetPlatformIDs,
        clGetPlatformInfo,
        clGetDeviceIDs,
        clGetDeviceInfo,
        clCreateContext,
        clCreateContextFromType,
        clRetainContext,
        clReleaseContext,
        clGetContextInfo,
        clCreateCommandQueue,
        clRetainCommandQueue,
        clReleaseCommandQueue,
        clGetCommandQueueInfo,
        clSetCommandQueueProperty,
        clCreateBuffer,
        clCreateImage2D,
        clCreateImage3D,
        clRetainMemObject,
        clReleaseMemObject,
        clGetSupportedImageFormats,
        clGetMemObjectInfo,
        clGetImageInfo,
        clCreateSampler,
        clRetainSampler,
        clReleaseSampler,
        clGetSamplerInfo,
        clCreateProgramWithSource,
        clCreateProgramWithBinary,
        clRetainProgram,
        clReleaseProgram,
        clBuildProgram,
        clUnloadCompiler,
        clGetProgramInfo,
        clGetProgramBuildInfo,
        clCreateKernel,
        clCreateKernelsInProgram,
        clRetainKernel,
        clReleaseKernel,
        clSetKernelArg,
        clGetKernelInfo,
        clGetKernelWorkGroupInfo,
        clWaitForEvents,
        clGetEventInfo,
        clRetainEvent,
        clReleaseEvent,
        clGetEventProfilingInfo,
        clFlush,
        clFinish,
        clEnqueueReadBuffer,
        clEnqueueWriteBuffer,
        clEnqueueCopyBuffer,
        clEnqueueReadImage,
        clEnqueueWriteImage,
        clEnqueueCopyImage,
        clEnqueueCopyImageToBuffer,
        clEnqueueCopyBufferToImage,
        clEnqueueMapBuffer,
        clEnqueueMapImage,
        clEnqueueUnmapMemObject,
        clEnqueueNDRangeKernel,
        clEnqueueTask,
        clEnqueueNativeKernel,
        clEnqueueMarker,
        clEnqueueWaitForEvents,
        clEnqueueBarrier,
        clGetExtensionFunctionAddress,
        clCreateFromGLBuffer,
        clCreateFromGLTexture2D,
        clCreateFromGLTexture3D,
        clCreateFromGLRenderbuffer,
        clGetGLObjectInfo,
        clGetGLTextureInfo,
        clEnqueueAcquireGLObjects,
        clEnqueueReleaseGLObjects,
        clGetGLContextInfoKHR,
        clGetDeviceIDsFromD3D10KHR,
        clCreateFromD3D10BufferKHR,
        clCreateFromD3D10Texture2DKHR,
        clCreateFromD3D10Texture3DKHR,
        clEnqueueAcquireD3D10ObjectsKHR,
        clEnqueueReleaseD3D10ObjectsKHR,
        clSetEventCallback,
        clCreateSubBuffer,
        clSetMemObjectDestructorCallback,
        clCreateUserEvent,
        clSetUserEventStatus,
        clEnqueueReadBufferRect,
        clEnqueueWriteBufferRect,
        clEnqueueCopyBufferRect,
        clCreateSubDevicesEXT,
        clRetainDeviceEXT,
        clReleaseDeviceEXT,
        clCreateEventFromGLsyncKHR,
        clCreateSubDevices,
        clRetainDevice,
        clReleaseDevice,
        clCreateImage,
        clCreateProgramWithBuiltInKernels,
        clCompileProgram,
        clLinkProgram,
        clUnloadPlatformCompiler,
        clGetKernelArgInfo,
        clEnqueueFillBuffer,
        clEnqueueFillImage,
        clEnqueueMigrateMemObjects,
        clEnqueueMarkerWithWaitList,
        clEnqueueBarrierWithWaitList,
        clGetExtensionFunctionAddressForPlatform,
        clCreateFromGLTexture,
        clGetDeviceIDsFromD3D11KHR,
        clCreateFromD3D11BufferKHR,
        clCreateFromD3D11Texture2DKHR,
        clCreateFromD3D11Texture3DKHR,
        clCreateFromDX9MediaSurfaceKHR,
        clEnqueueAcquireD3D11ObjectsKHR,
        clEnqueueReleaseD3D11ObjectsKHR,
        clGetDeviceIDsFromDX9MediaAdapterKHR,
        clEnqueueAcquireDX9MediaSurfacesKHR,
        clEnqueueReleaseDX9MediaSurfacesKHR,
        clCreateFromEGLImageKHR,
        clEnqueueAcquireEGLObjectsKHR,
        clEnqueueReleaseEGLObjectsKHR,
        clCreateEventFromEGLSyncKHR,
        clCreateCommandQueueWithProperties,
        clCreatePipe,
        clGetPipeInfo,
        clSVMAlloc,
        clSVMFree,
        clEnqueueSVMFree,
        clEnqueueSVMMemcpy,
        clEnqueueSVMMemFill,
        clEnqueueSVMMap,
        clEnqueueSVMUnmap,
        clCreateSamplerWithProperties,
        clSetKernelArgSVMPointer,
        clSetKernelExecInfo,
        clGetKernelSubGroupInfoKHR,
        clCloneKernel,
        clCreateProgramWithIL,
        clEnqueueSVMMigrateMem,
        clGetDeviceAndHostTimer,
        clGetHostTimer,
        clGetKernelSubGroupInfo,
        clSetDefaultDeviceCommandQueue,
        clSetProgramReleaseCallback,
        clSetProgramSpecializationConstant,
        clCreateBufferWithProperties,
        clCreateImageWithProperties,
        clSetContextDestructorCallback,
    )
}

#[test]
fn the_dispatch_table_matches_the_system_cl_icd_h() {
    let fields = khronos_fields();
    let mut c = String::from("#define CL_TARGET_OPENCL_VERSION 300\n#include <CL/cl_icd.h>\n#include <stddef.h>\n#include <stdio.h>\nint main(void) {\n");
    c += "    printf(\"sizeof %zu\\n\", sizeof(cl_icd_dispatch));\n";
    for (name, _) in &fields {
        c += &format!("    printf(\"{name} %zu\\n\", offsetof(cl_icd_dispatch, {name}));\n");
    }
    c += "    return 0;\n}\n";
    let dir = common::scratch_dir("layout");
    let exe = common::cc(&dir, "layout", &c, &[]);
    let out = common::run_ok(std::process::Command::new(&exe));
    let mut lines = out.lines();
    let size: usize = lines
        .next()
        .and_then(|l| l.strip_prefix("sizeof "))
        .and_then(|s| s.parse().ok())
        .expect("sizeof line");
    for ((name, rust), line) in fields.iter().zip(lines) {
        let c_offset: usize = line
            .strip_prefix(&format!("{name} "))
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("bad line {line:?}"));
        assert_eq!(
            *rust, c_offset,
            "{name}: Rust offset {rust}, C offset {c_offset}"
        );
    }
    let word = size_of::<usize>();
    for (i, (name, offset)) in fields.iter().enumerate() {
        assert_eq!(
            *offset,
            i * word,
            "{name} is field {i}: the list has no gap"
        );
    }
    assert_eq!(
        fields.len() * word,
        size,
        "the list covers the whole C struct"
    );
    assert_eq!(
        KHRONOS_ENTRIES,
        fields.len(),
        "the layer hands the loader exactly the Khronos entries"
    );
}
