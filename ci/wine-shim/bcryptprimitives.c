/* bcryptprimitives.dll for Wine 8.0, which lacks it: Rust's standard library (1.78 and later)
 * imports ProcessPrng from it for its random numbers (rust-lang/rust#121337), so no Rust
 * Windows program starts under Wine 8.0 without this DLL. ProcessPrng fills the buffer from
 * the system RNG, exactly what BCryptGenRandom with BCRYPT_USE_SYSTEM_PREFERRED_RNG does.
 * Built with mingw-w64 and copied into the Wine prefix's system32 by .ci/run (CI only; a
 * real Windows 10 or later has the DLL). */
#include <windows.h>
#include <bcrypt.h>

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
    while (len > 0) {
        ULONG n = len > 0x40000000 ? 0x40000000 : (ULONG)len;
        if (BCryptGenRandom(NULL, data, n, BCRYPT_USE_SYSTEM_PREFERRED_RNG) != 0)
            return FALSE;
        data += n;
        len -= n;
    }
    return TRUE;
}
