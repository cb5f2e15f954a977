package kvlease

import (
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
)

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
			return fmt.Errorf("%w: %q has %q at byte %d (allowed: letters, digits, - / _ = .)",
				ErrInvalidName, name, r, i)
		}
	}
	return nil
}

// validatePrefix accepts "" or anything that could begin a valid name.
func validatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if err := ValidateName(strings.TrimSuffix(prefix, ".")); err != nil {
		return fmt.Errorf("prefix: %w", err)
	}
	return nil
}

func keyByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '-' || c == '/' || c == '_' || c == '=' || c == '.'
}

// ValidateHolder reports whether holder can identify a lease holder: 1 to
// [MaxHolderLen] bytes of printable UTF-8.
func ValidateHolder(holder string) error {
	switch {
	case holder == "":
		return fmt.Errorf("%w: empty", ErrInvalidHolder)
	case len(holder) > MaxHolderLen:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidHolder, len(holder), MaxHolderLen)
	case !utf8.ValidString(holder):
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalidHolder)
	case strings.IndexFunc(holder, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		return fmt.Errorf("%w: %q has a non-printable character", ErrInvalidHolder, holder)
	}
	return nil
}
