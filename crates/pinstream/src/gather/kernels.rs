//! The gather's OpenCL C source: the copy kernels it builds once per context.

/// The copy kernels: one work-group per segment; 16-byte accesses in the body where the two
/// sides share their alignment (the planner makes them share it), bytes at the ends.
pub(super) const KERNELS: &str = r#"
static void ps_copy(__global uchar* to, __global const uchar* from, ulong n) {
    size_t l = get_local_id(0), w = get_local_size(0);
    ulong head = (16 - ((size_t)to & 15)) & 15;
    if ((((size_t)to ^ (size_t)from) & 15) != 0) head = n;
    if (head > n) head = n;
    for (ulong i = l; i < head; i += w) to[i] = from[i];
    ulong body = (n - head) >> 4;
    __global uint4* t4 = (__global uint4*)(to + head);
    __global const uint4* f4 = (__global const uint4*)(from + head);
    for (ulong i = l; i < body; i += w) t4[i] = f4[i];
    for (ulong i = head + (body << 4) + l; i < n; i += w) to[i] = from[i];
}

__kernel void ps_scatter(__global uchar* stage, __global uchar* dst, ulong table) {
    __global const ulong* row = (__global const ulong*)(stage + table) + 3 * get_group_id(0);
    ps_copy(dst + row[1], stage + row[0], row[2]);
}

__kernel void ps_gather(__global uchar* stage, __global const uchar* src, ulong table) {
    __global const ulong* row = (__global const ulong*)(stage + table) + 3 * get_group_id(0);
    ps_copy(stage + row[0], src + row[1], row[2]);
}

/* Zero-copy rows (`table`: from offset, to offset, length), one work-group each. The bus side
   (mapped host memory, `host_len` bytes) is reached in aligned 16-byte words whatever the
   pieces' misalignment, a warp's words one contiguous run, and the device side byte by byte:
   whole words keep the link busy, and device memory takes bytes at no cost that matters.
   Words are taken apart and put together with shifts, in registers (a private byte array
   made the NVIDIA compiler's writes to host memory ten times slower). The buffers start
   page-aligned, so offsets and addresses share their alignment. */
static uchar ps_byte(ulong2 w, ulong k) {
    return (uchar)((k < 8 ? w.x : w.y) >> (8 * (k & 7)));
}

/* Row `g` of a zero-copy table: three uints when `narrow`, three ulongs otherwise. */
static ulong3 ps_row(__global const ulong* table, size_t g, uint narrow) {
    __global const uint* t = (__global const uint*)table + 3 * g;
    __global const ulong* w = table + 3 * g;
    return narrow ? (ulong3)(t[0], t[1], t[2]) : (ulong3)(w[0], w[1], w[2]);
}

__kernel void ps_rows_from_host(__global const uchar* from, __global uchar* to,
                                __global const ulong* table, ulong host_len, uint narrow) {
    ulong3 row = ps_row(table, get_group_id(0), narrow);
    ulong s = row.x, end = s + row.z;
    ulong d = row.y - s; /* wraps: d + x is the device offset of host byte x */
    for (ulong a = (s & ~(ulong)15) + 16 * get_local_id(0); a < end; a += 16 * get_local_size(0)) {
        ulong2 w = (ulong2)(0, 0);
        if (a + 16 <= host_len) {
            w = *(__global const ulong2*)(from + a);
        } else {
            for (uint k = 0; a + k < host_len; k++) {
                ulong b = (ulong)from[a + k] << (8 * (k & 7));
                if (k < 8) w.x |= b; else w.y |= b;
            }
        }
        ulong lo = a < s ? s : a, hi = a + 16 < end ? a + 16 : end;
        for (ulong x = lo; x < hi; x++) to[d + x] = ps_byte(w, x - a);
    }
}

/* Host bytes [x, e) from from[src + x], in the fewest naturally aligned writes (8, 4, 2 or 1
   bytes): each is one transaction on the bus, and none may pass the piece (a neighbour may
   share the word). */
static void ps_edge(__global uchar* to, ulong x, ulong e, __global const uchar* from, ulong src) {
    while (x < e) {
        uint n = ((x & 7) == 0 && x + 8 <= e) ? 8 : ((x & 3) == 0 && x + 4 <= e) ? 4
               : ((x & 1) == 0 && x + 2 <= e) ? 2 : 1;
        ulong v = 0;
        for (uint k = 0; k < n; k++) v |= (ulong)from[src + x + k] << (8 * k);
        if (n == 8) *(__global ulong*)(to + x) = v;
        else if (n == 4) *(__global uint*)(to + x) = (uint)v;
        else if (n == 2) *(__global ushort*)(to + x) = (ushort)v;
        else to[x] = (uchar)v;
        x += n;
    }
}

/* The 8 device bytes at from[at], little-endian, as one word. */
static ulong ps_word(__global const uchar* from, ulong at) {
    ulong v = 0;
    for (uint k = 0; k < 8; k++) v |= (ulong)from[at + k] << (8 * k);
    return v;
}

__kernel void ps_rows_to_host(__global const uchar* from, __global uchar* to,
                              __global const ulong* table, ulong host_len, uint narrow) {
    ulong3 row = ps_row(table, get_group_id(0), narrow);
    ulong s = row.y, end = s + row.z;
    ulong src = row.x - s; /* wraps, as in ps_rows_from_host */
    for (ulong a = (s & ~(ulong)15) + 16 * get_local_id(0); a < end; a += 16 * get_local_size(0)) {
        if (a >= s && a + 16 <= end) {
            *(__global ulong2*)(to + a) =
                (ulong2)(ps_word(from, src + a), ps_word(from, src + a + 8));
        } else {
            ps_edge(to, a > s ? a : s, a + 16 < end ? a + 16 : end, from, src);
        }
    }
}
"#;
