//! The parameters of the `__global__` functions in CUDA C source, read from the source.
//!
//! OpenCL tells a program its kernels' parameters (`clGetKernelArgInfo`); CUDA does not (an
//! `extern "C"` kernel's symbol carries no types, NVRTC reports none). pinstream binds a
//! user's kernel by its parameters, so it reads the signature from the source: the name and
//! parameter list after each `__global__`, types mapped to OpenCL C's spelling (`unsigned
//! long long` is `ulong`, `__half` is `half`) with their sizes. Comments and preprocessor
//! lines are skipped; a signature written through macros or templates is not understood, and
//! the kernel is then reported as such instead of guessed. No crate parses CUDA C, and a C
//! parser (`lang-c`) would need the preprocessed source, which NVRTC does not return.

use crate::backend::api::{AddressSpace, ArgInfo};

/// One parameter: what binding needs and its size in bytes (`None`: a type pinstream does
/// not know, which it then cannot pass).
#[derive(Debug, Clone)]
pub(crate) struct Param {
    pub info: ArgInfo,
    pub size: Option<usize>,
}

/// A `__global__` function as the source declares it.
#[derive(Debug, Clone)]
pub(crate) struct Signature {
    pub name: String,
    /// Declared `extern "C"` (directly or inside an `extern "C" { }` block), so that its
    /// symbol is its name.
    pub extern_c: bool,
    pub params: Vec<Param>,
}

/// Every `__global__` function of `src`, in order.
pub(crate) fn kernels(src: &str) -> Vec<Signature> {
    let text = strip(src);
    let blocks = extern_c_blocks(&text);
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find("__global__").map(|i| i + from) {
        from = at + "__global__".len();
        let Some((name, open)) = name_and_paren(&text, from) else {
            continue;
        };
        let Some(close) = matching(&text, open) else {
            continue;
        };
        let extern_c = blocks.iter().any(|b| b.contains(&at)) || declared_extern_c(&text, at);
        out.push(Signature {
            name,
            extern_c,
            params: split_params(&text[open + 1..close])
                .into_iter()
                .map(param)
                .collect(),
        });
        from = close;
    }
    out
}

/// The source without comments and preprocessor lines (each replaced by spaces, so offsets
/// keep their meaning).
fn strip(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let mut line_start = true;
    while i < b.len() {
        let rest = &b[i..];
        let skip_to = if rest.starts_with(b"//") || (line_start && trimmed_hash(rest)) {
            rest.iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |n| i + n)
        } else if rest.starts_with(b"/*") {
            find(rest, b"*/").map_or(b.len(), |n| i + n + 2)
        } else {
            line_start = b[i] == b'\n' || (line_start && b[i].is_ascii_whitespace());
            out.push(b[i]);
            i += 1;
            continue;
        };
        out.extend(
            b[i..skip_to]
                .iter()
                .map(|&c| if c == b'\n' { b'\n' } else { b' ' }),
        );
        i = skip_to;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn trimmed_hash(rest: &[u8]) -> bool {
    rest.iter().find(|c| !matches!(c, b' ' | b'\t')) == Some(&b'#')
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The byte ranges inside `extern "C" { ... }` blocks.
fn extern_c_blocks(text: &str) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find("extern").map(|i| i + from) {
        from = at + 6;
        let rest = text[from..].trim_start();
        let Some(after) = rest.strip_prefix("\"C\"") else {
            continue;
        };
        if after.trim_start().starts_with('{') {
            let open = text.len() - after.trim_start().len();
            if let Some(close) = matching(text, open) {
                out.push(open..close);
            }
        }
    }
    out
}

/// True when the declaration that holds `at` (from the last `;`, `{` or `}` before it)
/// says `extern "C"`.
fn declared_extern_c(text: &str, at: usize) -> bool {
    let start = text[..at].rfind([';', '{', '}']).map_or(0, |i| i + 1);
    let decl: String = text[start..at]
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    decl.contains("extern \"C\"")
}

/// The function name after `__global__` and the offset of its `(`, skipping
/// `__launch_bounds__(...)`.
fn name_and_paren(text: &str, mut i: usize) -> Option<(String, usize)> {
    let b = text.as_bytes();
    let mut last = None;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_alphabetic() || c == b'_' {
            let end = (i..b.len())
                .find(|&j| !(b[j].is_ascii_alphanumeric() || b[j] == b'_'))
                .unwrap_or(b.len());
            let word = &text[i..end];
            i = end;
            if word == "__launch_bounds__" {
                let open = text[i..].find('(')? + i;
                i = matching(text, open)? + 1;
                continue;
            }
            last = Some(word.to_string());
        } else if c == b'(' {
            return last.map(|n| (n, i));
        } else if matches!(c, b';' | b'{' | b'}' | b'=') {
            return None;
        } else {
            i += 1;
        }
    }
    None
}

/// The offset of the bracket that closes the one at `open`.
fn matching(text: &str, open: usize) -> Option<usize> {
    let (o, c) = match text.as_bytes()[open] {
        b'(' => (b'(', b')'),
        b'{' => (b'{', b'}'),
        _ => return None,
    };
    let mut depth = 0usize;
    for (i, &ch) in text.as_bytes().iter().enumerate().skip(open) {
        if ch == o {
            depth += 1;
        } else if ch == c {
            depth -= 1;
            if depth == 0 {
                return Some(i);
            }
        }
    }
    None
}

/// The parameter list split at its top-level commas.
fn split_params(list: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in list.char_indices() {
        match c {
            '(' | '<' | '[' => depth += 1,
            ')' | '>' | ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&list[start..]);
    let out: Vec<&str> = out.into_iter().map(str::trim).collect();
    match out.as_slice() {
        [""] | ["void"] => Vec::new(),
        _ => out,
    }
}

const QUALIFIERS: [&str; 7] = [
    "const",
    "volatile",
    "__restrict__",
    "__restrict",
    "restrict",
    "__grid_constant__",
    "struct",
];

/// One parameter, e.g. `const unsigned short* __restrict__ w`.
fn param(text: &str) -> Param {
    let text = text.split('=').next().unwrap_or("");
    let pointer = text.contains('*');
    let reference = text.contains('&') || text.contains('[');
    let words: Vec<&str> = text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty() && !QUALIFIERS.contains(w))
        .collect();
    let (name, base) = match words.split_last() {
        Some((n, rest)) if !rest.is_empty() => (n.to_string(), rest.join(" ")),
        _ => (String::new(), words.join(" ")),
    };
    let known = scalar(&base);
    let base_name = known.map_or(base.clone(), |(n, _)| n.to_string());
    let (type_name, size, space) = if reference {
        (text.trim().to_string(), None, AddressSpace::Private)
    } else if pointer {
        (format!("{base_name}*"), Some(8), AddressSpace::Global)
    } else {
        (base_name, known.map(|k| k.1), AddressSpace::Private)
    };
    Param {
        info: ArgInfo {
            name,
            type_name,
            space,
        },
        size,
    }
}

/// OpenCL C's name and the size of a CUDA scalar type.
fn scalar(t: &str) -> Option<(&'static str, usize)> {
    // `long` is 64-bit on LP64 targets (Linux) and 32-bit on LLP64 (Windows), as CUDA
    // follows the host compiler.
    const LONG: (&str, usize) = if cfg!(windows) {
        ("int", 4)
    } else {
        ("long", 8)
    };
    const ULONG: (&str, usize) = if cfg!(windows) {
        ("uint", 4)
    } else {
        ("ulong", 8)
    };
    Some(match t {
        "float" => ("float", 4),
        "double" => ("double", 8),
        "half" | "__half" => ("half", 2),
        "char" | "signed char" | "int8_t" => ("char", 1),
        "unsigned char" | "uint8_t" | "uchar" => ("uchar", 1),
        "short" | "short int" | "signed short" | "int16_t" => ("short", 2),
        "unsigned short" | "unsigned short int" | "uint16_t" | "ushort" => ("ushort", 2),
        "int" | "signed" | "signed int" | "int32_t" => ("int", 4),
        "unsigned" | "unsigned int" | "uint32_t" | "uint" => ("uint", 4),
        "long long" | "long long int" | "signed long long" | "int64_t" | "ptrdiff_t" => ("long", 8),
        "unsigned long long" | "unsigned long long int" | "uint64_t" | "size_t" | "ulong" => {
            ("ulong", 8)
        }
        "long" | "long int" | "signed long" => LONG,
        "unsigned long" | "unsigned long int" => ULONG,
        "bool" => ("bool", 1),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GEMV: &str = r#"
// y = W·x (the built-in, as the engine compiles it)
#include <cstdint>
extern "C" __global__ void gemv_f16(const unsigned short* __restrict__ w, float* y,
                                    const float* x, unsigned long long n,
                                    unsigned long long block, /* comment, with a comma */
                                    unsigned long long offset, unsigned int cols) { }
"#;

    fn names(s: &Signature) -> Vec<(String, String, Option<usize>)> {
        s.params
            .iter()
            .map(|p| (p.info.name.clone(), p.info.type_name.clone(), p.size))
            .collect()
    }

    #[test]
    fn reads_a_kernel_signature_in_opencl_spelling() {
        let k = kernels(GEMV);
        assert_eq!(k.len(), 1);
        assert_eq!(k[0].name, "gemv_f16");
        assert!(k[0].extern_c);
        let p = names(&k[0]);
        assert_eq!(p[0], ("w".into(), "ushort*".into(), Some(8)));
        assert_eq!(p[3], ("n".into(), "ulong".into(), Some(8)));
        assert_eq!(p[6], ("cols".into(), "uint".into(), Some(4)));
        assert_eq!(p.len(), 7);
        assert!(k[0].params[0].info.is_buffer() && !k[0].params[3].info.is_buffer());
    }

    #[test]
    fn blocks_bounds_and_missing_extern_c() {
        let src = r#"
extern "C" {
__global__ void __launch_bounds__(256, 2) scale(float* x, size_t n, size_t b, size_t o, float f) {}
}
__global__ void plain(int* x) { }
template <typename T> __global__ void tmpl(T* x) { }
__device__ int helper(int a) { return a; }
"#;
        let k = kernels(src);
        let got: Vec<(&str, bool)> = k.iter().map(|s| (s.name.as_str(), s.extern_c)).collect();
        assert_eq!(got, [("scale", true), ("plain", false), ("tmpl", false)]);
        assert_eq!(names(&k[0])[4], ("f".into(), "float".into(), Some(4)));
        assert_eq!(k[1].params.len(), 1);
    }

    /// The engine's CUDA C built-ins read as their OpenCL twins' parameters do.
    #[test]
    fn the_built_in_kernels_read_like_their_opencl_twins() {
        use pinstream_lab::kernels::{GEMV_F16_CUDA, MIX_U32_CUDA};
        let mix = kernels(MIX_U32_CUDA);
        assert_eq!(mix.len(), 1);
        assert!(mix[0].extern_c);
        let types: Vec<String> = names(&mix[0]).into_iter().map(|p| p.1).collect();
        assert_eq!(types, ["uint*", "ulong", "ulong", "ulong"]);
        let gemv = kernels(GEMV_F16_CUDA);
        assert_eq!((gemv.len(), gemv[0].name.as_str()), (1, "gemv_f16"));
        let types: Vec<String> = names(&gemv[0]).into_iter().map(|p| p.1).collect();
        assert_eq!(
            types,
            ["ushort*", "float*", "float*", "ulong", "ulong", "ulong", "uint"]
        );
        // And the engine binds them as it binds the OpenCL kernels: W in, y out, x resident,
        // the counts, then `cols` as a 4-byte value (the width the launch checks).
        let params: Vec<ArgInfo> = gemv[0].params.iter().map(|p| p.info.clone()).collect();
        let shape = crate::engine::bind::Shape {
            inputs: 1,
            output: true,
            residents: 1,
        };
        let cols = [("cols".to_string(), "8192".to_string())];
        let b = crate::engine::bind::bind("gemv_f16", &params, &shape, &cols).unwrap();
        assert_eq!(
            (b.inputs, b.output, b.residents),
            (vec![0], Some(1), vec![2])
        );
        assert_eq!(b.scalars, vec![(6, 8192u32.to_ne_bytes().to_vec())]);
        assert_eq!(gemv[0].params[6].size, Some(4));
    }

    #[test]
    fn unknown_types_have_no_size() {
        let k = kernels("extern \"C\" __global__ void f(float4 v, int& r) {}");
        let p = names(&k[0]);
        assert_eq!(p[0], ("v".into(), "float4".into(), None));
        assert_eq!(p[1].2, None);
        assert!(kernels("extern \"C\" __global__ void g(void) {}")[0]
            .params
            .is_empty());
        assert!(kernels("#define K __global__ void h(int x)\nint y;").is_empty());
    }
}
