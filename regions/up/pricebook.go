package up

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
)

// DevelopmentPriceBookID names the price book Start creates in a control
// plane that has none, so that invoices can be read without an operator
// writing one first.
const DevelopmentPriceBookID = "development"

// developmentPriceBook prices, in USD, every meter but topics and
// partitions, for every region. The prices are development defaults, not
// anyone's list prices (docs/billing.md). It is in effect since the Unix
// epoch, so any book an operator creates for a region, or for every region
// with a later effective_time, prices the months after it instead.
func developmentPriceBook() *cpv1.PriceBook {
	const gib = 1 << 30
	flat := func(meter, unit string, size int64, price string) *cpv1.Price {
		return &cpv1.Price{Meter: meter, Unit: unit, UnitSize: size, Tiers: []*cpv1.PriceTier{{UnitPrice: price}}}
	}
	return &cpv1.PriceBook{Currency: "USD", EffectiveTime: timestamppb.New(time.Unix(0, 0)), Prices: []*cpv1.Price{
		flat("messages_in", "million messages", 1_000_000, "0.40"),
		flat("messages_out", "million messages", 1_000_000, "0.20"),
		flat("bytes_in", "GiB", gib, "0.05"),
		flat("bytes_out", "GiB", gib, "0.04"),
		flat("bytes_replicated_out", "GiB", gib, "0.02"),
		flat("storage_bytes", "GiB-hour", gib, "0.0001"),
		flat("broker_hours", "broker-hour", 1, "0.12"),
		flat("bookie_hours", "bookie-hour", 1, "0.08"),
		flat("function_instance_seconds", "instance-hour", 3600, "0.05"),
	}}
}

// ensurePriceBook creates the development price book when the control
// plane has no price book at all; a store that has books (the development
// one from an earlier start, or an operator's) is left as it is.
func ensurePriceBook(ctx context.Context, conn grpc.ClientConnInterface) error {
	books := cpv1.NewPriceBooksClient(conn)
	list, err := books.ListPriceBooks(ctx, &cpv1.ListPriceBooksRequest{PageSize: 1})
	if err != nil {
		return fmt.Errorf("up: list price books: %w", err)
	}
	if len(list.GetPriceBooks()) > 0 {
		return nil
	}
	_, err = books.CreatePriceBook(ctx, &cpv1.CreatePriceBookRequest{PriceBookId: DevelopmentPriceBookID, PriceBook: developmentPriceBook()})
	if err != nil && status.Code(err) != codes.AlreadyExists {
		return fmt.Errorf("up: create the development price book: %w", err)
	}
	return nil
}
