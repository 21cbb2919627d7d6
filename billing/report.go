package billing

// NamespaceUsage is one namespace's usage on one broker process, in the
// JSON a broker serves at GET /magnetar/v1/usage.
type NamespaceUsage struct {
	Tenant    string `json:"tenant"`
	Namespace string `json:"namespace"`
	// Counters of every topic since the process started (the Prometheus
	// series; the roll-up bills persistent topics from Sources instead).
	MessagesIn            int64 `json:"messagesIn"`
	BytesIn               int64 `json:"bytesIn"`
	MessagesOut           int64 `json:"messagesOut"`
	BytesOut              int64 `json:"bytesOut"`
	MessagesReplicatedOut int64 `json:"messagesReplicatedOut"`
	BytesReplicatedOut    int64 `json:"bytesReplicatedOut"`
	// The part of the counters above made by non-persistent topics, since
	// the process started (billed from the process's epoch).
	NonPersistentMessagesIn  int64 `json:"nonPersistentMessagesIn,omitempty"`
	NonPersistentBytesIn     int64 `json:"nonPersistentBytesIn,omitempty"`
	NonPersistentMessagesOut int64 `json:"nonPersistentMessagesOut,omitempty"`
	NonPersistentBytesOut    int64 `json:"nonPersistentBytesOut,omitempty"`
	// FunctionInstanceSeconds counts the seconds function, source and sink
	// instances of the namespace ran on this broker's function worker,
	// since the process started (billed from the process's epoch).
	FunctionInstanceSeconds int64 `json:"functionInstanceSeconds,omitempty"`
	// Sampled when the report is made: logical bytes retained, topics (a
	// partitioned topic counts on the broker serving its partition 0) and
	// partitions (a non-partitioned topic is one).
	StorageBytes int64 `json:"storageBytes"`
	Topics       int64 `json:"topics"`
	Partitions   int64 `json:"partitions"`
}

// SourceUsage is a durable counter of a persistent topic: "in <topic>"
// (messages and bytes stored for producers) or "out <topic> <subscription>"
// (messages and bytes consumed by a durable subscription). Its values
// depend only on what is stored in the topic up to the counter's position,
// so they survive the broker process and move with the topic between
// brokers; Epoch names the counter's start (a topic or subscription created
// again has a new one).
type SourceUsage struct {
	Source      string `json:"source"`
	Epoch       string `json:"epoch"`
	Tenant      string `json:"tenant"`
	Namespace   string `json:"namespace"`
	MessagesIn  int64  `json:"messagesIn,omitempty"`
	BytesIn     int64  `json:"bytesIn,omitempty"`
	MessagesOut int64  `json:"messagesOut,omitempty"`
	BytesOut    int64  `json:"bytesOut,omitempty"`
}

// UsageReport is a broker process's usage report.
type UsageReport struct {
	// Epoch is new for every process.
	Epoch      string           `json:"epoch"`
	Namespaces []NamespaceUsage `json:"namespaces"`
	// Sources are the durable counters of the persistent topics the broker
	// serves.
	Sources []SourceUsage `json:"sources,omitempty"`
}

// Samples turns the report of broker source into roll-up samples: one of
// the process (its epoch: bytes replicated out, non-persistent topics'
// messages and bytes, function instance-seconds, and the gauges) and one
// durable sample per source.
func (r UsageReport) Samples(source string) []Sample {
	s := Sample{Source: source, Epoch: r.Epoch, Counters: map[Meter]int64{}, Gauges: map[Meter]int64{}}
	for _, n := range r.Namespaces {
		s.Counters[MessagesIn] += n.NonPersistentMessagesIn
		s.Counters[BytesIn] += n.NonPersistentBytesIn
		s.Counters[MessagesOut] += n.NonPersistentMessagesOut
		s.Counters[BytesOut] += n.NonPersistentBytesOut
		s.Counters[BytesReplicatedOut] += n.BytesReplicatedOut
		s.Counters[FunctionInstanceSeconds] += n.FunctionInstanceSeconds
		s.Gauges[StorageBytes] += n.StorageBytes
		s.Gauges[Topics] += n.Topics
		s.Gauges[Partitions] += n.Partitions
	}
	out := []Sample{s}
	for _, u := range r.Sources {
		d := Sample{Source: u.Source, Epoch: u.Epoch, Durable: true, Counters: map[Meter]int64{}}
		if u.MessagesIn != 0 || u.BytesIn != 0 {
			d.Counters[MessagesIn], d.Counters[BytesIn] = u.MessagesIn, u.BytesIn
		}
		if u.MessagesOut != 0 || u.BytesOut != 0 {
			d.Counters[MessagesOut], d.Counters[BytesOut] = u.MessagesOut, u.BytesOut
		}
		out = append(out, d)
	}
	return out
}

// Namespace returns the usage of tenant/ns (zero if the report has none).
func (r UsageReport) Namespace(tenant, ns string) NamespaceUsage {
	for _, n := range r.Namespaces {
		if n.Tenant == tenant && n.Namespace == ns {
			return n
		}
	}
	return NamespaceUsage{}
}
