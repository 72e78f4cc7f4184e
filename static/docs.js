// Renders /v1/openapi.json with the vendored Swagger UI (a file, so the CSP needs no inline script).
window.addEventListener("load", function () {
  window.SwaggerUIBundle({ url: "/v1/openapi.json", dom_id: "#swagger-ui", deepLinking: true });
});
