package billing

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// Meter names a measured quantity.
type Meter string

// The meters. Quantities are integers in the meter's base unit.
const (
	MessagesIn         Meter = "messages_in"          // messages persisted for producers
	BytesIn            Meter = "bytes_in"             // payload bytes persisted for producers
	MessagesOut        Meter = "messages_out"         // messages dispatched to consumers
	BytesOut           Meter = "bytes_out"            // payload bytes dispatched to consumers
	BytesReplicatedOut Meter = "bytes_replicated_out" // payload bytes sent to other regions' clusters
	StorageBytes       Meter = "storage_bytes"        // peak logical bytes retained in the hour (byte-hours)
	Topics             Meter = "topics"               // peak topics in the hour (topic-hours)
	Partitions         Meter = "partitions"           // peak partitions in the hour (partition-hours)
	BrokerHours        Meter = "broker_hours"         // brokers of the cluster in the hour
	BookieHours        Meter = "bookie_hours"         // bookies of the cluster in the hour
	// FunctionInstanceSeconds counts the seconds the instances of Pulsar
	// functions, sources and sinks ran on the cluster's function workers.
	FunctionInstanceSeconds Meter = "function_instance_seconds"
)

// MeterInfo describes a meter.
type MeterInfo struct {
	Meter Meter
	// Unit is the base unit of the meter's quantities.
	Unit string
	// Gauge meters take the peak of the hour; the others sum increments.
	Gauge bool
}

// Meters lists every meter, in the order invoices show them.
var Meters = []MeterInfo{
	{MessagesIn, "message", false},
	{BytesIn, "byte", false},
	{MessagesOut, "message", false},
	{BytesOut, "byte", false},
	{BytesReplicatedOut, "byte", false},
	{StorageBytes, "byte-hour", true},
	{Topics, "topic-hour", true},
	{Partitions, "partition-hour", true},
	{BrokerHours, "broker-hour", true},
	{BookieHours, "bookie-hour", true},
	{FunctionInstanceSeconds, "instance-second", false},
}

// ErrUnknownMeter is wrapped by functions given a meter not in Meters.
var ErrUnknownMeter = errors.New("billing: unknown meter")

// Info returns the meter's description.
func (m Meter) Info() (MeterInfo, error) {
	for _, i := range Meters {
		if i.Meter == m {
			return i, nil
		}
	}
	return MeterInfo{}, fmt.Errorf("%w %q", ErrUnknownMeter, string(m))
}

// meterOrder is the position of m in Meters (len(Meters) if unknown).
func meterOrder(m Meter) int {
	for i, mi := range Meters {
		if mi.Meter == m {
			return i
		}
	}
	return len(Meters)
}

// Hour truncates t to its UTC hour.
func Hour(t time.Time) time.Time { return t.UTC().Truncate(time.Hour) }

// Key identifies one hourly usage total.
type Key struct {
	Organization string // "organizations/acme"
	Cluster      string // "organizations/acme/clusters/prod"
	Meter        Meter
	Hour         time.Time // UTC, on the hour
}

// IdempotencyKey is the key's deterministic identity: the hex SHA-256 of its
// fields, NUL-separated, with the hour in RFC 3339. The same usage window
// always has the same key, whoever computes it and however often.
func (k Key) IdempotencyKey() string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s", k.Organization, k.Cluster, k.Meter, k.Hour.UTC().Format(time.RFC3339))
	return hex.EncodeToString(h.Sum(nil))
}

// Validate checks that the key names a known meter and a whole UTC hour.
func (k Key) Validate() error {
	if k.Organization == "" || k.Cluster == "" {
		return errors.New("billing: usage key needs an organization and a cluster")
	}
	if _, err := k.Meter.Info(); err != nil {
		return err
	}
	if k.Hour.IsZero() || !k.Hour.Equal(Hour(k.Hour)) {
		return fmt.Errorf("billing: usage hour %s is not on a UTC hour", k.Hour.Format(time.RFC3339Nano))
	}
	return nil
}
