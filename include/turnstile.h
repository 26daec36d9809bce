/* libturnstile — umbrella header.  Each part has its own header:
 *   turnstile/common.h     clock, deadlines, export macro
 *   turnstile/cancel.h     cancel tokens
 *   turnstile/turnstile.h  bounded, ordered admission (turnstile, pass, claim)
 */
#ifndef TURNSTILE_H
#define TURNSTILE_H

#include <turnstile/common.h>
#include <turnstile/cancel.h>
#include <turnstile/turnstile.h>

#endif
