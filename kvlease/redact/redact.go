package redact

import "fmt"

// Mark stands for a secret in what Format prints.
const Mark = "REDACTED"

// Format prints *v as fmt would for f and verb, after setting each of
// secrets that is not empty to Mark (an empty one stays empty: Mark would
// say there was a secret). v is the caller's own copy, of a type that has
// no Format method (type plain T inside T's Format, or Format would call
// itself), and secrets point into it:
//
//	func (req GrantRequest) Format(f fmt.State, verb rune) {
//		type plain GrantRequest // without this method
//		p := plain(req)
//		redact.Format(f, verb, &p, &p.Secret)
//	}
func Format[T any](f fmt.State, verb rune, v *T, secrets ...*string) {
	for _, s := range secrets {
		if *s != "" {
			*s = Mark
		}
	}
	fmt.Fprintf(f, fmt.FormatString(f, verb), *v)
}
