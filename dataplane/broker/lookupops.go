package broker

import "context"

// PartitionsForLookup answers an HTTP lookup's partitioned-metadata
// request exactly as the binary PARTITIONED_METADATA command does,
// auto-creating a partitioned topic when the namespace policy says so.
func (s *Service) PartitionsForLookup(ctx context.Context, topic string) (int, error) {
	return s.partitionsForClient(ctx, topic)
}

// TopicCreated returns when the partitioned or non-persistent topic t was
// created (recorded by the admin API, or first seen by it), in Unix
// milliseconds.
func (s *Service) TopicCreated(ctx context.Context, t TopicName) int64 {
	return s.topicCreated(ctx, t, s.openedTopic(t))
}
