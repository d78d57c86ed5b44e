package bus

// advisoryMaxDeliveries is followed by <stream>.<consumer>.
const advisoryMaxDeliveries = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES"
