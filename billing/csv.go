package billing

import (
	"encoding/csv"
	"io"
	"strconv"
)

// Description names a line for people: "bytes_in, tier 2" or
// "bytes_in, free allowance".
func (l LineItem) Description() string {
	if l.Tier < 0 {
		return string(l.Meter) + ", free allowance"
	}
	return string(l.Meter) + ", tier " + strconv.Itoa(l.Tier+1)
}

// CSVLine is one line item as the CSV export writes it (decimals already
// formatted).
type CSVLine struct {
	Region, Meter, Tier, Quantity, Unit, UnitPrice, Amount string
}

// InvoiceCSV is an invoice as the CSV export writes it.
type InvoiceCSV struct {
	Organization, Period, State, Currency, Total string
	Lines                                        []CSVLine
}

// QuantityPlaces is how many decimal places quantities and unit prices are
// shown with (amounts use the exact values).
const QuantityPlaces = 12

// TierLabel is a tier's column value: "free" for the allowance, else its
// number from 1.
func TierLabel(tier int) string {
	if tier < 0 {
		return "free"
	}
	return strconv.Itoa(tier + 1)
}

// CSV formats the invoice for WriteCSV.
func (inv Invoice) CSV() InvoiceCSV {
	out := InvoiceCSV{Organization: inv.Organization, Period: inv.Period.String(), State: string(inv.State),
		Currency: inv.Currency, Total: FormatDecimal(inv.Total, MinorUnitDigits)}
	for _, l := range inv.Lines {
		out.Lines = append(out.Lines, CSVLine{Region: l.Region, Meter: string(l.Meter), Tier: TierLabel(l.Tier),
			Quantity: FormatExact(l.Quantity, QuantityPlaces), Unit: l.Unit, UnitPrice: FormatExact(l.UnitPrice, QuantityPlaces),
			Amount: FormatDecimal(l.Amount, MinorUnitDigits)})
	}
	return out
}

// WriteCSV writes a header, one row per line item and a last row with the
// total (empty region, meter "total").
func (c InvoiceCSV) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	head := []string{c.Organization, c.Period, c.State}
	rows := [][]string{{"organization", "period", "state", "region", "meter", "tier", "quantity", "unit", "unit_price", "amount", "currency"}}
	for _, l := range c.Lines {
		rows = append(rows, append(append([]string{}, head...), l.Region, l.Meter, l.Tier, l.Quantity, l.Unit, l.UnitPrice, l.Amount, c.Currency))
	}
	rows = append(rows, append(append([]string{}, head...), "", "total", "", "", "", "", c.Total, c.Currency))
	if err := cw.WriteAll(rows); err != nil {
		return err
	}
	return cw.Error()
}
