package broker

import (
	"fmt"
	"strconv"
	"strings"
)

// Domain is a topic's storage kind.
type Domain string

const (
	Persistent    Domain = "persistent"
	NonPersistent Domain = "non-persistent"
)

// partitionSuffix separates a partitioned topic's name from the index.
const partitionSuffix = "-partition-"

// TopicName is a parsed Pulsar topic name:
// {persistent|non-persistent}://tenant/namespace/local. Short forms are
// accepted as Pulsar does: "local" means persistent://public/default/local
// and "tenant/ns/local" means persistent://tenant/ns/local.
type TopicName struct {
	Domain    Domain
	Tenant    string
	Namespace string // namespace without the tenant
	Local     string // may end in -partition-N
}

// ParseTopicName parses and validates a topic name.
func ParseTopicName(s string) (TopicName, error) {
	var t TopicName
	rest := s
	if i := strings.Index(s, "://"); i >= 0 {
		t.Domain, rest = Domain(s[:i]), s[i+3:]
		if t.Domain != Persistent && t.Domain != NonPersistent {
			return TopicName{}, fmt.Errorf("invalid topic domain %q in %q", t.Domain, s)
		}
	} else {
		t.Domain = Persistent
		if !strings.Contains(s, "/") {
			rest = "public/default/" + s
		}
	}
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) != 3 {
		return TopicName{}, fmt.Errorf("invalid topic name %q: want tenant/namespace/topic", s)
	}
	t.Tenant, t.Namespace, t.Local = parts[0], parts[1], parts[2]
	if err := validName(t.Tenant); err != nil {
		return TopicName{}, fmt.Errorf("invalid tenant in topic %q: %w", s, err)
	}
	if err := validName(t.Namespace); err != nil {
		return TopicName{}, fmt.Errorf("invalid namespace in topic %q: %w", s, err)
	}
	if t.Local == "" || strings.ContainsAny(t.Local, "\x00") {
		return TopicName{}, fmt.Errorf("invalid topic name %q: empty local name", s)
	}
	return t, nil
}

// validName checks a tenant or namespace name: Pulsar allows letters,
// digits and -_=:. characters.
func validName(s string) error {
	if s == "" {
		return fmt.Errorf("empty name")
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case strings.ContainsRune("-_=:.", r):
		default:
			return fmt.Errorf("character %q not allowed in %q", r, s)
		}
	}
	return nil
}

// String returns the full name.
func (t TopicName) String() string {
	return string(t.Domain) + "://" + t.Tenant + "/" + t.Namespace + "/" + t.Local
}

// NamespaceName returns "tenant/namespace".
func (t TopicName) NamespaceName() string { return t.Tenant + "/" + t.Namespace }

// PartitionIndex returns the partition index for "<base>-partition-N", or -1.
func (t TopicName) PartitionIndex() int {
	i := strings.LastIndex(t.Local, partitionSuffix)
	if i < 0 {
		return -1
	}
	n, err := strconv.Atoi(t.Local[i+len(partitionSuffix):])
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// Base returns the topic without a partition suffix.
func (t TopicName) Base() TopicName {
	if t.PartitionIndex() < 0 {
		return t
	}
	b := t
	b.Local = t.Local[:strings.LastIndex(t.Local, partitionSuffix)]
	return b
}

// Partition returns partition i of the topic.
func (t TopicName) Partition(i int) TopicName {
	p := t.Base()
	p.Local = p.Local + partitionSuffix + strconv.Itoa(i)
	return p
}

// ledgerName is the managed-ledger name of a persistent topic.
func (t TopicName) ledgerName() string {
	return t.Tenant + "/" + t.Namespace + "/" + string(t.Domain) + "/" + t.Local
}

// nameIn returns t with its parts as substrings of key, its ledgerName: a
// loaded topic holds its name once (the broker's registry key, the topic's
// name and the managed ledger's name share it), and the domain is the
// package's constant, not a piece of a request.
func (t TopicName) nameIn(key string) TopicName {
	tenant, rest, _ := strings.Cut(key, "/")
	ns, rest, _ := strings.Cut(rest, "/")
	_, local, _ := strings.Cut(rest, "/")
	d := Persistent
	if t.Domain == NonPersistent {
		d = NonPersistent
	}
	return TopicName{Domain: d, Tenant: tenant, Namespace: ns, Local: local}
}
