// Preloaded into supergateway by bench/cmd/httpload (node --require):
// supergateway 4.0.0 listens on every interface (app.listen(port)) and has
// no option for the host; this makes every listen without a host listen
// on 127.0.0.1, so that the benchmark stays on loopback.
const net = require("net");
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === "number" && typeof args[1] !== "string") {
    args.splice(1, 0, "127.0.0.1");
  }
  return listen.apply(this, args);
};
