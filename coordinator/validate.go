package coordinator

import (
	"time"
	"unicode/utf8"
)

// Limits on what a lease request may carry.
const (
	// MinTTL and MaxTTL bound a lease's time to live. The executor keeps
	// its own leases at 5 minutes or less.
	MinTTL = time.Second
	MaxTTL = 15 * time.Minute
	// MaxKeyBytes and MaxOwnerBytes bound keys and owners, in bytes of
	// UTF-8. An owner taken over the API is "ACTOR/OWNER", two strings
	// bounded in characters (128 and 100), up to 4 bytes each: 913 bytes.
	MaxKeyBytes   = 512
	MaxOwnerBytes = 1024
)

func validateKey(key string) error {
	return validateString("key", key, MaxKeyBytes)
}

func validateOwner(owner string) error {
	return validateString("owner", owner, MaxOwnerBytes)
}

// validateString accepts 1 to max bytes of UTF-8 without control
// characters. Keys and owners are opaque to the coordinator; control
// characters are refused because they have no business in an identifier
// and would mangle logs and URLs.
func validateString(field, s string, max int) error {
	switch {
	case s == "":
		return invalid(field, "must not be empty")
	case len(s) > max:
		return invalid(field, "is %d bytes, at most %d allowed", len(s), max)
	case !utf8.ValidString(s):
		return invalid(field, "is not valid UTF-8")
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return invalid(field, "contains a control character")
		}
	}
	return nil
}

func validateTTL(ttl time.Duration) error {
	if ttl < MinTTL || ttl > MaxTTL {
		return invalid("ttl", "%s is out of range [%s, %s]", ttl, MinTTL, MaxTTL)
	}
	return nil
}

func validateFence(f Fence) error {
	if err := validateKey(f.Key); err != nil {
		return err
	}
	if err := validateOwner(f.Owner); err != nil {
		return err
	}
	if f.Token <= 0 {
		return invalid("token", "%d is not a fencing token (tokens are positive)", f.Token)
	}
	return nil
}
