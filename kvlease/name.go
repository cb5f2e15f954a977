package kvlease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

const (
	// MaxNameLen is the longest lease name accepted, in bytes.
	MaxNameLen = 255
	// MaxHolderLen is the longest holder identity accepted, in bytes.
	MaxHolderLen = 255
	// MaxRequestIDLen is the longest grant request ID accepted, in bytes.
	MaxRequestIDLen = 128
	// MinSecretLen and MaxSecretLen bound a caller-chosen grant secret, in
	// bytes: at least 16, so that it cannot be guessed when chosen at
	// random (the Go client uses 32 hex digits, 128 bits).
	MinSecretLen = 16
	MaxSecretLen = 256
)

// ReservedPrefix begins the names of a grantor's own leases (its
// observer's, package grantor): [Store.Grant] refuses them unless its ctx
// comes from [GrantorContext]. An election for the observer's lease, made
// through a Store, stopped the grantors' history and change events for as
// long as it held the lease (found by an outside client).
const ReservedPrefix = "_leased."

// Reserved reports whether every lease name that begins with prefix is a
// grantor's own (begins [ReservedPrefix]): a listing, watch or history of
// such a prefix shows nothing, as the grantor leaves its own leases out.
func Reserved(prefix string) bool { return strings.HasPrefix(prefix+".", ReservedPrefix) }

type grantorKey struct{}

// GrantorContext returns ctx marked as a grantor's own, whose grants may
// name leases beginning [ReservedPrefix]. Only a grantor's code uses it.
func GrantorContext(ctx context.Context) context.Context {
	return context.WithValue(ctx, grantorKey{}, true)
}

// checkReserved refuses name, if it begins [ReservedPrefix], for a grant
// whose ctx is not a grantor's own.
func checkReserved(ctx context.Context, name string) error {
	if strings.HasPrefix(name, ReservedPrefix) && ctx.Value(grantorKey{}) == nil {
		return fmt.Errorf("%w: lease names beginning %q are the grantor's own", ErrInvalidName, ReservedPrefix)
	}
	return nil
}

// ValidateName reports whether name can be a lease name: 1 to [MaxNameLen]
// bytes of letters, digits and - / _ = . , not starting or ending with a dot
// and without empty tokens (NATS KV key rules, wildcards excluded).
func ValidateName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty", ErrInvalidName)
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidName, len(name), MaxNameLen)
	}
	if name[0] == '.' || name[len(name)-1] == '.' || strings.Contains(name, "..") {
		return fmt.Errorf("%w: %q has an empty dot-separated token", ErrInvalidName, name)
	}
	for i, r := range name { // runes, so that the error shows the character typed
		if r >= utf8.RuneSelf || !keyByte(byte(r)) {
			return fmt.Errorf("%w: %q has %q at byte %d (allowed: ASCII letters and digits, - / _ = .)",
				ErrInvalidName, name, r, i)
		}
	}
	return nil
}

// ValidatePrefix accepts "" or anything that could begin a valid lease
// name (a name, or one ending in a dot): the prefixes of List, Watch and
// the grantor's history.
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if err := ValidateName(strings.TrimSuffix(prefix, ".")); err != nil {
		return fmt.Errorf("prefix %q: %w", prefix, err) // the error names what is left of it
	}
	return nil
}

func keyByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '-' || c == '/' || c == '_' || c == '=' || c == '.'
}

// ValidateHolder reports whether holder can identify a lease holder: 1 to
// [MaxHolderLen] bytes of printable UTF-8, without U+FFFD, neither beginning
// nor ending with a space.
func ValidateHolder(holder string) error {
	switch {
	case holder == "":
		return fmt.Errorf("%w: empty", ErrInvalidHolder)
	case len(holder) > MaxHolderLen:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidHolder, len(holder), MaxHolderLen)
	case !utf8.ValidString(holder):
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalidHolder)
	case strings.ContainsRune(holder, utf8.RuneError):
		// What a JSON decoder makes of invalid UTF-8 and of a lone
		// surrogate (\ud800): two holders that were different bytes
		// became one (found by an outside client, through the service).
		return fmt.Errorf("%w: %q has U+FFFD, the replacement character (invalid UTF-8 on its way here?)", ErrInvalidHolder, holder)
	case strings.IndexFunc(holder, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		return fmt.Errorf("%w: %q has a non-printable character", ErrInvalidHolder, holder)
	case strings.TrimSpace(holder) != holder:
		// "  " was a holder, a blank column in ls and history (found by
		// an outside client); " web-1" and "web-1" two.
		return fmt.Errorf("%w: %q begins or ends with a space", ErrInvalidHolder, holder)
	}
	return nil
}

// ValidateRequestID reports whether id can name a grant request (see
// [GrantRequest].RequestID): 1 to [MaxRequestIDLen] bytes of letters,
// digits and - _ . : (a UUID or a random hex string fits).
func ValidateRequestID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty", ErrInvalidRequestID)
	case len(id) > MaxRequestIDLen:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidRequestID, len(id), MaxRequestIDLen)
	}
	for i := range len(id) {
		if c := id[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '_' || c == '.' || c == ':') {
			return fmt.Errorf("%w: request id has %q at byte %d (allowed: ASCII letters and digits, - _ . :)", ErrInvalidRequestID, c, i)
		}
	}
	return nil
}

// ValidateSecret reports whether secret can be a caller-chosen grant
// secret: [MinSecretLen] to [MaxSecretLen] bytes of visible ASCII (no
// spaces). The error never shows the secret.
func ValidateSecret(secret string) error {
	if len(secret) < MinSecretLen || len(secret) > MaxSecretLen {
		return fmt.Errorf("%w: secret of %d bytes, want %d to %d", ErrInvalidRequestID, len(secret), MinSecretLen, MaxSecretLen)
	}
	for i := range len(secret) {
		if c := secret[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("%w: secret has a byte outside visible ASCII at %d", ErrInvalidRequestID, i)
		}
	}
	return nil
}

// NewRequestID returns a random grant request ID and secret (128 bits
// each, hex), for a caller that retries a grant: [Acquire] makes one pair
// per call.
func NewRequestID() (id, secret string) {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:16]), hex.EncodeToString(b[16:])
}
