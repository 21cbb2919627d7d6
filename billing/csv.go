package billing

import (
	"encoding/csv"
	"io"
	"strconv"
)

// LineDescription names a line for people: "bytes_in, tier 2" or
// "bytes_in, free allowance".
func (l LineItem) Description() string {
	if l.Tier < 0 {
		return string(l.Meter) + ", free allowance"
	}
	return string(l.Meter) + ", tier " + strconv.Itoa(l.Tier+1)
}

// InvoiceCSVHeader is the header row of WriteCSV.
var InvoiceCSVHeader = []string{"organization", "period", "state", "region", "meter", "tier", "quantity", "unit", "unit_price", "amount", "currency"}

// WriteCSV writes the invoice as CSV: a header, one row per line item and a
// last row with the total (empty region, meter "total").
func (inv Invoice) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(InvoiceCSVHeader); err != nil {
		return err
	}
	head := []string{inv.Organization, inv.Period.String(), string(inv.State)}
	for _, l := range inv.Lines {
		tier := strconv.Itoa(l.Tier + 1)
		if l.Tier < 0 {
			tier = "free"
		}
		row := append(append([]string{}, head...), l.Region, string(l.Meter), tier, FormatExact(l.Quantity, 12), l.Unit,
			FormatExact(l.UnitPrice, 12), FormatDecimal(l.Amount, MinorUnitDigits), inv.Currency)
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	row := append(append([]string{}, head...), "", "total", "", "", "", "", FormatDecimal(inv.Total, MinorUnitDigits), inv.Currency)
	if err := cw.Write(row); err != nil {
		return err
	}
	cw.Flush()
	return cw.Error()
}
