package pulsaradmin

import (
	"context"

	"github.com/magnetar-dev/magnetar/billing"
)

// Usage reads the broker's usage counters (GET /magnetar/v1/usage, a
// superuser call).
func (c *Client) Usage(ctx context.Context) (billing.UsageReport, error) {
	var u billing.UsageReport
	err := c.do(ctx, "GET", "/magnetar/v1/usage", nil, &u)
	return u, err
}
