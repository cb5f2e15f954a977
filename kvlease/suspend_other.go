//go:build !linux

package kvlease

import "time"

// suspendObservable: systemSuspended does not tell the time suspended.
const suspendObservable = false

// systemSuspended is 0 where the system does not tell how long it was
// suspended (see holderNow).
func systemSuspended() time.Duration { return 0 }
