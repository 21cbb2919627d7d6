package pf

import (
	"context"

	"github.com/magnetar-dev/magnetar/client/functions/internal/state"
)

// Function state: a Magnetar extension. Pulsar's Go SDK has no state; these
// methods have the meaning of the Java Context's incrCounter, getCounter,
// putState, getState and deleteState, with keys scoped to the function, and
// call the worker's state API at the instance's stateStorageServiceUrl.

// ErrStateNotConfigured is returned (possibly wrapped) by every state method
// when the worker gave the instance no http(s) stateStorageServiceUrl.
var ErrStateNotConfigured = state.ErrNotConfigured

// StateError is the error of a state call the worker refused: its HTTP
// status and the reason the worker gave.
type StateError = state.Error

// IncrCounter adds amount (which may be negative) to the counter key.
func (c *FunctionContext) IncrCounter(ctx context.Context, key string, amount int64) error {
	_, err := c.state.Incr(ctx, key, amount)
	return err
}

// GetCounter returns the value of the counter key; 0 when it was never
// incremented.
func (c *FunctionContext) GetCounter(ctx context.Context, key string) (int64, error) {
	return c.state.Counter(ctx, key)
}

// PutState sets the state key to value.
func (c *FunctionContext) PutState(ctx context.Context, key string, value []byte) error {
	return c.state.Put(ctx, key, value)
}

// GetState returns the value of the state key. An absent key is not an
// error: GetState returns nil, nil (as the Java and Python contexts return
// null and None); a key set to an empty value returns a non-nil empty slice.
func (c *FunctionContext) GetState(ctx context.Context, key string) ([]byte, error) {
	return c.state.Get(ctx, key)
}

// DeleteState removes the state key; removing an absent key is not an error.
func (c *FunctionContext) DeleteState(ctx context.Context, key string) error {
	return c.state.Delete(ctx, key)
}
