//go:build !linux

package kvlease

import "time"

// systemSuspended is 0 where the system does not tell how long it was
// suspended (see holderNow).
func systemSuspended() time.Duration { return 0 }
