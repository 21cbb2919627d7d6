package broker

// KeyHash exposes the Key_Shared key hash to the external tests.
var KeyHash = keyHash
