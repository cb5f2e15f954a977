package fence

import (
	"errors"
	"fmt"

	"github.com/leased/leased/kvlease"
)

// ErrStaleToken: a fence refused a token lower than one it has accepted
// (see [StaleTokenError]). It lives here, not in kvlease, because only a
// resource refuses tokens: the lease core never returns it.
var ErrStaleToken = errors.New("fence: stale fencing token")

// StaleTokenError is returned by a fence that has already accepted a higher
// token for the resource.
type StaleTokenError struct {
	Resource string
	Token    kvlease.Token
	Highest  kvlease.Token
}

func (e *StaleTokenError) Error() string {
	return fmt.Sprintf("fence: stale token %d for %q: %d already accepted", e.Token, e.Resource, e.Highest)
}

// Is makes errors.Is(err, ErrStaleToken) true.
func (e *StaleTokenError) Is(target error) bool { return target == ErrStaleToken }
