package bus

import (
	"errors"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// StorageFull reports whether err says that the NATS server could not store
// a message for want of room: its JetStream storage limit is reached
// (insufficient resources, which the server also answers when its disk
// filled up under that limit), the account's is, or a write to its disk
// failed for lack of space.
func StorageFull(err error) bool {
	if err == nil {
		return false
	}
	var api *jetstream.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode {
		case 10023, // JSInsufficientResourcesErr
			10047, // JSStorageResourcesExceededErr
			10002: // JSAccountResourcesExceededErr
			return true
		}
	}
	msg := err.Error()
	return strings.Contains(msg, "insufficient resources") || strings.Contains(msg, "insufficient storage") ||
		strings.Contains(msg, "no space left on device")
}
