package core

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/byzlog/byzlog/protos/wire"
)

// scanRecordSet counts a serialized RecordSet's records, and each record's
// headers, without allocating, so that a batch holding millions of empty
// records (or headers) is refused, or charged, before anything is decoded.
// It returns the records and the headers of all records.
func scanRecordSet(b []byte, maxRecords, maxHeaders int) (records, allHeaders int, _ wire.Code, _ string) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, 0, wire.CodeMalformedTx, "records are not a byzlog.v1.RecordSet: bad field tag"
		}
		b = b[n:]
		if num != 1 || typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return 0, 0, wire.CodeMalformedTx, "records are not a byzlog.v1.RecordSet: bad field value"
			}
			b = b[n:]
			continue
		}
		rec, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return 0, 0, wire.CodeMalformedTx, "records are not a byzlog.v1.RecordSet: bad record length"
		}
		b = b[n:]
		if records++; records > maxRecords {
			return 0, 0, wire.CodeBatchTooLarge, fmt.Sprintf("batch holds more than the chain's %d records", maxRecords)
		}
		headers := 0
		for len(rec) > 0 {
			num, typ, n := protowire.ConsumeTag(rec)
			if n < 0 {
				return 0, 0, wire.CodeMalformedTx, fmt.Sprintf("record %d is not a byzlog.v1.Record: bad field tag", records-1)
			}
			rec = rec[n:]
			if n = protowire.ConsumeFieldValue(num, typ, rec); n < 0 {
				return 0, 0, wire.CodeMalformedTx, fmt.Sprintf("record %d is not a byzlog.v1.Record: bad field value", records-1)
			}
			rec = rec[n:]
			if num == 3 {
				allHeaders++
				if headers++; headers > maxHeaders {
					return 0, 0, wire.CodeTooManyHeaders, fmt.Sprintf("record %d has more than the chain's %d headers", records-1, maxHeaders)
				}
			}
		}
	}
	return records, allHeaders, wire.CodeOK, ""
}
