package billing

// NamespaceUsage is one namespace's usage on one broker process, in the
// JSON a broker serves at GET /magnetar/v1/usage.
type NamespaceUsage struct {
	Tenant    string `json:"tenant"`
	Namespace string `json:"namespace"`
	// Counters since the process started.
	MessagesIn            int64 `json:"messagesIn"`
	BytesIn               int64 `json:"bytesIn"`
	MessagesOut           int64 `json:"messagesOut"`
	BytesOut              int64 `json:"bytesOut"`
	MessagesReplicatedOut int64 `json:"messagesReplicatedOut"`
	BytesReplicatedOut    int64 `json:"bytesReplicatedOut"`
	// Sampled when the report is made: logical bytes retained, topics (a
	// partitioned topic counts on the broker serving its partition 0) and
	// partitions (a non-partitioned topic is one).
	StorageBytes int64 `json:"storageBytes"`
	Topics       int64 `json:"topics"`
	Partitions   int64 `json:"partitions"`
}

// UsageReport is a broker process's usage report.
type UsageReport struct {
	// Epoch is new for every process.
	Epoch      string           `json:"epoch"`
	Namespaces []NamespaceUsage `json:"namespaces"`
}

// Sample sums the report's namespaces into a roll-up sample of source.
func (r UsageReport) Sample(source string) Sample {
	s := Sample{Source: source, Epoch: r.Epoch, Counters: map[Meter]int64{}, Gauges: map[Meter]int64{}}
	for _, n := range r.Namespaces {
		s.Counters[MessagesIn] += n.MessagesIn
		s.Counters[BytesIn] += n.BytesIn
		s.Counters[MessagesOut] += n.MessagesOut
		s.Counters[BytesOut] += n.BytesOut
		s.Counters[BytesReplicatedOut] += n.BytesReplicatedOut
		s.Gauges[StorageBytes] += n.StorageBytes
		s.Gauges[Topics] += n.Topics
		s.Gauges[Partitions] += n.Partitions
	}
	return s
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
