//! What Windows' memory errors mean and how to fix them: pure functions of the error code,
//! compiled on every platform so that the tests check the wording on Linux as well as under
//! Wine. `windows.rs` calls them with the codes `GetLastError` gives.
//!
//! The codes are Win32's (winerror.h); on Windows a test checks them against `windows-sys`.

use crate::units::Bytes;

/// `ERROR_NOT_ENOUGH_MEMORY`.
pub const ERROR_NOT_ENOUGH_MEMORY: i32 = 8;
/// `ERROR_OUTOFMEMORY`.
pub const ERROR_OUTOFMEMORY: i32 = 14;
/// `ERROR_PRIVILEGE_NOT_HELD`: large pages without `SeLockMemoryPrivilege`.
pub const ERROR_PRIVILEGE_NOT_HELD: i32 = 1314;
/// `ERROR_NO_SYSTEM_RESOURCES`.
pub const ERROR_NO_SYSTEM_RESOURCES: i32 = 1450;
/// `ERROR_WORKING_SET_QUOTA`: `VirtualLock` beyond the minimum working set.
pub const ERROR_WORKING_SET_QUOTA: i32 = 1453;
/// `ERROR_COMMITMENT_LIMIT`: RAM plus the paging file are spoken for.
pub const ERROR_COMMITMENT_LIMIT: i32 = 1455;

/// What the memory error `code` means and what to do about it; `None` for a code this
/// function does not know (the caller then shows the system's own text).
pub fn memory_error_fix(code: i32) -> Option<&'static str> {
    Some(match code {
        ERROR_WORKING_SET_QUOTA => "the process's working-set quota is too small (ERROR_WORKING_SET_QUOTA, 1453): VirtualLock locks no more than the minimum working set, and Windows could not raise it that far, usually because there is not that much RAM to spare. Free memory or ask for less, or use a driver-pinning strategy such as `register` or `nv-host`, which needs no VirtualLock and no working-set quota",
        ERROR_NO_SYSTEM_RESOURCES => "Windows is out of the kernel resources needed to lock or map that much (ERROR_NO_SYSTEM_RESOURCES, 1450): ask for less, or stream through a ring of smaller buffers (`pinstream run` does)",
        ERROR_COMMITMENT_LIMIT => "the commit limit is reached (ERROR_COMMITMENT_LIMIT, 1455): RAM plus the paging file cannot back that much. Ask for less, close other programs, or enlarge the paging file (System Properties > Advanced > Performance > Virtual memory)",
        ERROR_NOT_ENOUGH_MEMORY | ERROR_OUTOFMEMORY => "Windows has not enough memory for that (ERROR_NOT_ENOUGH_MEMORY): ask for less or close other programs",
        ERROR_PRIVILEGE_NOT_HELD => "large pages need the \"Lock pages in memory\" right (SeLockMemoryPrivilege, ERROR_PRIVILEGE_NOT_HELD, 1314): grant it to your account in secpol.msc (Local Policies > User Rights Assignment), then sign out and in; without it normal pages are used",
        _ => return None,
    })
}

/// The explanation of an OS error: [`memory_error_fix`]'s for a known code, else the
/// system's text `os_text`.
fn explain(code: Option<i32>, os_text: &str) -> String {
    code.and_then(memory_error_fix)
        .map_or_else(|| os_text.to_string(), str::to_string)
}

/// The message for a failed `VirtualLock` of `bytes`: the error's meaning and fix, the
/// minimum working set (`working_set_min`, read after the failure) and the way around it.
pub fn lock_failure(
    bytes: u64,
    working_set_min: Option<u64>,
    code: Option<i32>,
    os_text: &str,
) -> String {
    let ws = working_set_min.map_or_else(|| "unknown".into(), |l| Bytes(l).to_string());
    let why = explain(code, os_text);
    let fix = if code == Some(ERROR_WORKING_SET_QUOTA) {
        String::new()
    } else {
        ". Ask for less, or use a driver-pinning strategy such as `register` or `nv-host`, which needs no VirtualLock and no working-set quota".into()
    };
    format!(
        "VirtualLock could not lock {}: {why}; the minimum working set is {ws}{fix}",
        Bytes(bytes)
    )
}

/// The message for a failed `VirtualAlloc` of `bytes`.
pub fn alloc_failure(bytes: u64, code: Option<i32>, os_text: &str) -> String {
    format!(
        "VirtualAlloc of {} failed: {}",
        Bytes(bytes),
        explain(code, os_text)
    )
}

/// What limits a driver's pin on Windows, and what to do when a pin of that size fails.
pub const WDDM_PIN_LIMIT: &str = "on Windows, WDDM puts a budget on the memory drivers lock for the GPU, reported as about half of RAM (ComfyUI caps pinned memory at 40% of RAM on Windows; not measured by pinstream): pin at most what `pinstream doctor` finds pins, or stream through a ring of smaller buffers (`pinstream run` does)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_code_names_itself_and_a_fix() {
        let cases = [
            (ERROR_WORKING_SET_QUOTA, "1453", "driver-pinning strategy"),
            (ERROR_NO_SYSTEM_RESOURCES, "1450", "ask for less"),
            (ERROR_COMMITMENT_LIMIT, "1455", "paging file"),
            (
                ERROR_NOT_ENOUGH_MEMORY,
                "ERROR_NOT_ENOUGH_MEMORY",
                "ask for less",
            ),
            (
                ERROR_OUTOFMEMORY,
                "ERROR_NOT_ENOUGH_MEMORY",
                "close other programs",
            ),
            (ERROR_PRIVILEGE_NOT_HELD, "1314", "Lock pages in memory"),
        ];
        for (code, name, fix) in cases {
            let m = memory_error_fix(code).unwrap();
            assert!(m.contains(name) && m.contains(fix), "{code}: {m}");
        }
        assert_eq!(memory_error_fix(5), None);
    }

    #[test]
    fn a_lock_failure_names_the_working_set_and_the_fix() {
        let m = lock_failure(1 << 30, Some(200 << 10), Some(ERROR_WORKING_SET_QUOTA), "x");
        assert!(m.starts_with("VirtualLock could not lock 1 GiB: the process's working-set quota"));
        assert!(m.contains("the minimum working set is 200 KiB"), "{m}");
        assert!(m.contains("`register`"), "{m}");
        assert!(!m.contains(" x"), "the system text is replaced: {m}");
    }

    #[test]
    fn an_unknown_lock_error_keeps_the_systems_text_and_still_names_the_way_around() {
        let m = lock_failure(
            4096,
            None,
            Some(87),
            "The parameter is incorrect. (os error 87)",
        );
        assert!(
            m.contains("The parameter is incorrect. (os error 87)"),
            "{m}"
        );
        assert!(m.contains("the minimum working set is unknown"), "{m}");
        assert!(m.contains("needs no VirtualLock"), "{m}");
        let m = lock_failure(4096, None, Some(ERROR_COMMITMENT_LIMIT), "");
        assert!(
            m.contains("1455") && m.contains("needs no VirtualLock"),
            "{m}"
        );
    }

    #[test]
    fn an_alloc_failure_says_virtualalloc_and_the_fix() {
        let m = alloc_failure(3 << 30, Some(ERROR_COMMITMENT_LIMIT), "y");
        assert!(
            m.starts_with("VirtualAlloc of 3 GiB failed: the commit limit"),
            "{m}"
        );
        assert_eq!(
            alloc_failure(1, None, "no reason"),
            "VirtualAlloc of 1 B failed: no reason"
        );
    }
}
