package provisioner_test

import (
	"testing"

	"github.com/magnetar-dev/magnetar/regions/provisioner"
	"github.com/magnetar-dev/magnetar/regions/provisioner/provisionertest"
)

func TestMemoryConformance(t *testing.T) {
	provisionertest.Run(t, func(t *testing.T) provisioner.Provisioner { return provisioner.NewMemory() })
}
