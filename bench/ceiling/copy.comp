#version 450
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Src { uvec4 s[]; };
layout(std430, binding = 1) writeonly buffer Dst { uvec4 d[]; };
layout(push_constant) uniform P { uint n; } p;
void main() {
  uint stride = gl_NumWorkGroups.x * 256u;
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) d[i] = s[i];
}
