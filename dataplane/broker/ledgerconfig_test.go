package broker

import (
	"encoding/json"
	"testing"
	"time"
)

func TestLedgerConfig(t *testing.T) {
	pol := func(js string) Policies {
		var p Policies
		if err := json.Unmarshal([]byte(js), &p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if c := ledgerConfig(pol(`{}`)); c != nil {
		t.Fatalf("no policies: %+v", c)
	}
	c := ledgerConfig(pol(`{"persistence":{"bookkeeperEnsemble":3,"bookkeeperWriteQuorum":2,"bookkeeperAckQuorum":2}}`))
	if c == nil || c.Ensemble != 3 || c.WriteQuorum != 2 || c.AckQuorum != 2 {
		t.Fatalf("persistence: %+v", c)
	}
	if c := ledgerConfig(pol(`{"persistence":{"bookkeeperEnsemble":1,"bookkeeperWriteQuorum":2,"bookkeeperAckQuorum":2}}`)); c != nil {
		t.Fatalf("invalid persistence accepted: %+v", c)
	}
	c = ledgerConfig(pol(`{"retention_policies":{"retentionTimeInMinutes":10,"retentionSizeInMB":-1}}`))
	if c == nil || c.RetentionTime != 10*time.Minute || c.RetentionSize != -1 || c.Ensemble != 0 {
		t.Fatalf("retention: %+v", c)
	}
	if c := ledgerConfig(pol(`{"retention_policies":{"retentionTimeInMinutes":0,"retentionSizeInMB":5}}`)); c != nil {
		t.Fatalf("half-zero retention accepted: %+v", c)
	}
}
