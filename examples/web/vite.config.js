import react from "@vitejs/plugin-react";
import { defineConfig } from "vite";

export default defineConfig({
  plugins: [react()],
  // @runwire/client is a file: dependency (a link to client_side/js): one React for both.
  resolve: { dedupe: ["react", "react-dom"] },
  base: "./",
});
