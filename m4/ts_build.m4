dnl SPDX-License-Identifier: MIT
# TS_WARNINGS: -Wall -Wextra always; --enable-werror (developer and CI
# builds) turns warnings into errors.
AC_DEFUN([TS_WARNINGS], [
  AC_ARG_ENABLE([werror],
    [AS_HELP_STRING([--enable-werror], [treat compiler warnings as errors])],
    [], [enable_werror=no])
  TS_WARN_CFLAGS="-Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wno-unused-parameter"
  AS_IF([test "x$enable_werror" = xyes], [TS_WARN_CFLAGS="$TS_WARN_CFLAGS -Werror"])
  AC_SUBST([TS_WARN_CFLAGS])
])

# TS_SANITIZER: --enable-sanitizer=address (ASan+UBSan) or =thread (TSan).
AC_DEFUN([TS_SANITIZER], [
  AC_ARG_ENABLE([sanitizer],
    [AS_HELP_STRING([--enable-sanitizer=KIND],
      [build with sanitizers: address (ASan+UBSan) or thread (TSan)])],
    [], [enable_sanitizer=no])
  AS_CASE([$enable_sanitizer],
    [no], [TS_SAN_CFLAGS=""],
    [address], [TS_SAN_CFLAGS="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"],
    [thread], [TS_SAN_CFLAGS="-fsanitize=thread -fno-omit-frame-pointer"],
    [AC_MSG_ERROR([--enable-sanitizer takes address or thread, not $enable_sanitizer])])
  AC_SUBST([TS_SAN_CFLAGS])
  AM_CONDITIONAL([SANITIZE_THREAD], [test "x$enable_sanitizer" = xthread])
])

# TS_FAULT_INJECTION: --enable-fault-injection compiles random yields and
# spins into the protocol's race windows (lib/hook.h), for stress runs.
AC_DEFUN([TS_FAULT_INJECTION], [
  AC_ARG_ENABLE([fault-injection],
    [AS_HELP_STRING([--enable-fault-injection],
      [yield at the protocol's race windows (stress testing only)])],
    [], [enable_fault_injection=no])
  TS_FAULT_CPPFLAGS=""
  AS_IF([test "x$enable_fault_injection" = xyes],
    [TS_FAULT_CPPFLAGS="-DTS_FAULT_INJECTION"])
  AC_SUBST([TS_FAULT_CPPFLAGS])
  AM_CONDITIONAL([FAULT_INJECTION], [test "x$enable_fault_injection" = xyes])
])

# TS_USDT: USDT probes through <sys/sdt.h> (Debian: systemtap-sdt-dev),
# detected by default; --disable-usdt drops them.
AC_DEFUN([TS_USDT], [
  AC_ARG_ENABLE([usdt],
    [AS_HELP_STRING([--disable-usdt], [build without USDT probes])],
    [], [enable_usdt=auto])
  TS_SDT_CPPFLAGS=""
  AS_IF([test "x$enable_usdt" != xno], [
    AC_CHECK_HEADER([sys/sdt.h], [enable_usdt=yes], [
      AS_IF([test "x$enable_usdt" = xyes], [AC_MSG_ERROR([--enable-usdt needs sys/sdt.h (systemtap-sdt-dev)])])
      enable_usdt=no])])
  AS_IF([test "x$enable_usdt" = xyes], [TS_SDT_CPPFLAGS="-DTS_HAVE_SDT"])
  AC_SUBST([TS_SDT_CPPFLAGS])
  AC_SUBST([TS_USDT], [$enable_usdt])
])
