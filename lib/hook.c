/* Storage for the test hook and the optional benchmark counters. */
#include "hook.h"
#include "counters.h"

_Atomic(ts_hook_fn) ts_hook;

#ifdef TS_ENABLE_COUNTERS
struct ts_counters ts_counters;
#endif
