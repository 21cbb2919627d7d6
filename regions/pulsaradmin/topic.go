package pulsaradmin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
)

// TopicName names a topic: persistent://tenant/namespace/topic or
// non-persistent://tenant/namespace/topic.
type TopicName struct {
	Persistent bool
	Tenant     string
	Namespace  string
	Topic      string
}

func (t TopicName) domain() string {
	if t.Persistent {
		return "persistent"
	}
	return "non-persistent"
}

// String is the topic's full Pulsar name.
func (t TopicName) String() string {
	return t.domain() + "://" + t.Tenant + "/" + t.Namespace + "/" + t.Topic
}

func (t TopicName) path(more ...string) string {
	return path(append([]string{t.domain(), t.Tenant, t.Namespace, t.Topic}, more...)...)
}

// Partitions reads a topic's partition count; 0 for a non-partitioned or
// missing topic (as Pulsar answers).
func (c *Client) Partitions(ctx context.Context, t TopicName) (int, error) {
	var meta struct {
		Partitions int `json:"partitions"`
	}
	err := c.do(ctx, http.MethodGet, t.path("partitions"), nil, &meta)
	return meta.Partitions, err
}

// topicExists says whether a non-partitioned topic exists in its namespace.
func (c *Client) topicExists(ctx context.Context, t TopicName) (bool, error) {
	var list []string
	if err := c.do(ctx, http.MethodGet, path(t.domain(), t.Tenant, t.Namespace), nil, &list); err != nil {
		return false, err
	}
	return slices.Contains(list, t.String()), nil
}

// EnsureTopic makes the topic exist with the given partitions (0: a
// non-partitioned topic). A partitioned topic with fewer partitions gets
// more; one with more partitions, or a topic of the other shape, is an
// ErrPartitions error (Pulsar cannot do it). It returns what it did:
// "createTopic", "createPartitionedTopic", "updatePartitions" or nothing.
func (c *Client) EnsureTopic(ctx context.Context, t TopicName, partitions int) ([]string, error) {
	if partitions < 0 {
		return nil, fmt.Errorf("%w: %d partitions for %s", ErrPartitions, partitions, t)
	}
	cur, err := c.Partitions(ctx, t)
	if err != nil {
		return nil, err
	}
	switch {
	case partitions == 0 && cur > 0:
		return nil, fmt.Errorf("%w: %s is partitioned (%d), want non-partitioned", ErrPartitions, t, cur)
	case partitions > 0 && cur > partitions:
		return nil, fmt.Errorf("%w: %s has %d partitions, want %d (partitions are never removed)", ErrPartitions, t, cur, partitions)
	case partitions > 0 && cur == partitions:
		return nil, nil
	case partitions > 0 && cur > 0:
		if err := c.do(ctx, http.MethodPost, t.path("partitions"), partitions, nil); err != nil {
			return nil, err
		}
		return []string{"updatePartitions"}, nil
	}
	exists, err := c.topicExists(ctx, t)
	if err != nil {
		return nil, err
	}
	if partitions > 0 {
		if exists {
			return nil, fmt.Errorf("%w: %s is non-partitioned, want %d partitions", ErrPartitions, t, partitions)
		}
		if err := c.do(ctx, http.MethodPut, t.path("partitions"), partitions, nil); err != nil {
			return nil, err
		}
		return []string{"createPartitionedTopic"}, nil
	}
	if exists {
		return nil, nil
	}
	err = c.do(ctx, http.MethodPut, t.path(), nil, nil)
	if errors.Is(err, ErrConflict) {
		return nil, nil // created meanwhile
	}
	if err != nil {
		return nil, err
	}
	return []string{"createTopic"}, nil
}

// DeleteTopic deletes a topic, partitioned or not; a missing topic is not
// an error. With force, producers and consumers are disconnected first;
// without it Pulsar refuses while the topic is in use.
func (c *Client) DeleteTopic(ctx context.Context, t TopicName, force bool) error {
	n, err := c.Partitions(ctx, t)
	if err != nil {
		return ignoreNotFound(err)
	}
	q := ""
	if force {
		q = "?force=true"
	}
	if n > 0 {
		return ignoreNotFound(c.do(ctx, http.MethodDelete, t.path("partitions")+q, nil, nil))
	}
	return ignoreNotFound(c.do(ctx, http.MethodDelete, t.path()+q, nil, nil))
}
